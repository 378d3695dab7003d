"""The humaneval prompt protocol and solution assembly, shared by the evaluator and the scripted
recipe.

The user turn is OpenCompass's ``humaneval_openai_sample_evals_gen_dcae0e`` instruction followed by
the problem's prompt. A reply's code is extracted (first markdown code block, else the whole reply)
and joined to the prompt; the evaluator and the recipe's reward both judge that solution with
:mod:`agent_kit.function_judge` (the tests run in a process of their own and call the function
across the process boundary).

Agent side: imports nothing from the task's grader side.
"""

from __future__ import annotations

import re

INSTRUCTION = (
    "Read the following function signature and docstring, and fully implement the function "
    "described. "
    "Your response should only contain the code for this function.\n"
)

_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)


def format_prompt(prompt: str) -> str:
    """The user turn for one problem.

    >>> format_prompt("def f():\\n").endswith(
    ...     "only contain the code for this function.\\ndef f():\\n")
    True
    """
    return INSTRUCTION + prompt


def extract_code(completion: str) -> str:
    """The code in a reply: the first fenced block (an unclosed fence runs to the end), else the
    reply.

    >>> extract_code("Here:\\n```python\\ndef f():\\n    return 1\\n```\\nDone.")
    'def f():\\n    return 1\\n'
    >>> extract_code("    return x + 1\\n")
    '    return x + 1\\n'
    >>> extract_code("```python\\ndef f():\\n    return 2")
    'def f():\\n    return 2'
    """
    match = _FENCE.search(completion)
    return match.group(1) if match else completion


def build_solution(prompt: str, completion: str, entry_point: str) -> str:
    """The candidate's program: the prompt with the reply's code, defining ``entry_point``.

    If the code defines ``entry_point`` it is appended after the prompt (the prompt alone is valid
    Python and provides the imports and helpers the code may rely on; the code's definition
    replaces the prompt's). Otherwise the code is the body that continues the prompt; a body
    written without indentation is indented by four spaces.

    >>> print(build_solution("def f(x):\\n    'Doc.'\\n", "return x", "f"))
    def f(x):
        'Doc.'
        return x
    <BLANKLINE>
    >>> build_solution("def f(x):\\n    'Doc.'\\n",
    ...                "```python\\ndef f(x):\\n    return 1\\n```", "f")
    "def f(x):\\n    'Doc.'\\n\\ndef f(x):\\n    return 1\\n"
    """
    code = extract_code(completion)
    if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        solution = f"{prompt}\n{code}"
    else:
        lines = code.split("\n")
        first = next((line for line in lines if line.strip()), "")
        if first and not first[0].isspace():
            code = "\n".join(f"    {line}" if line.strip() else line for line in lines)
        solution = prompt + code
    return f"{solution.rstrip()}\n"
