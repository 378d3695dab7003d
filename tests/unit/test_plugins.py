"""Plugin folders outside the package: checks, task discovery, config options, ``autorl.ls``,
workers."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import autorl.task_code
from autorl import ls, plugins
from autorl.errors import ConfigError, TaskError
from autorl.registry import CONF_DIR, list_options, load_object, option_file
from autorl.task_code import TASKS_DIR
from autorl.tasks import discover_tasks, get_task, load_evaluator, load_task_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Undo what :func:`plugins.activate` does to this process: the variable, sys.path, task_code's
    search path, and the modules imported from this test's folders (a later test's folder of the
    same task id must not meet them)."""
    monkeypatch.delenv(plugins.PLUGIN_PATH_ENV, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(autorl.task_code, "__path__", list(autorl.task_code.__path__))
    yield
    for name, module in list(sys.modules.items()):
        # By __file__ only: autorl.task_code's __path__ still holds this test's folders at this
        # point.
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve().is_relative_to(tmp_path.resolve()):
            del sys.modules[name]


def copy_task(plugin: Path, source: str, new_id: str) -> Path:
    """Copy ``tasks/<source>`` into ``plugin`` as task ``new_id`` (the folder is the whole task)."""
    folder = plugin / "tasks" / new_id
    shutil.copytree(TASKS_DIR / source, folder, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = folder / "task.yaml"
    manifest.write_text(manifest.read_text().replace(f"id: {source}\n", f"id: {new_id}\n", 1))
    return folder


def test_a_folder_that_is_not_a_plugin_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(
        ConfigError,
        match=(
            rf"plugin folder {tmp_path / 'nope'} \(from the 'plugins' config key\) "
            r"does not exist"
        ),
    ):
        plugins.plugin_dirs([tmp_path / "nope"])
    (tmp_path / "empty" / "data").mkdir(parents=True)
    with pytest.raises(
        ConfigError,
        match=r"holds no tasks/, conf/ or Python code; a plugin folder holds tasks/<id>/",
    ):
        plugins.plugin_dirs([tmp_path / "empty"])
    monkeypatch.setenv(plugins.PLUGIN_PATH_ENV, str(tmp_path / "gone"))
    with pytest.raises(ConfigError, match=r"gone \(from \$AUTORL_PLUGIN_PATH\) does not exist"):
        plugins.plugin_dirs()
    with pytest.raises(ConfigError, match="gone"):
        discover_tasks()  # a worker with a wrong variable says so instead of "unknown task"


def test_plugin_folders_come_from_the_variable_then_the_key_each_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "conf").mkdir(parents=True)
    b.mkdir()
    (b / "mymod.py").write_text("VALUE = 1\n")
    monkeypatch.setenv(plugins.PLUGIN_PATH_ENV, f"{a}{os.pathsep}{os.pathsep}{b}")
    monkeypatch.chdir(tmp_path)
    assert plugins.plugin_dirs(["b", str(a)]) == [a, b]
    assert plugins.active_dirs() == [a, b]


def test_plugin_tasks_are_discovered_and_imported_under_task_code(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    copy_task(plugin, "gsm8k", "plugmath")
    assert "plugmath" not in discover_tasks()
    assert plugins.activate([plugin]) == [plugin]
    assert os.environ[plugins.PLUGIN_PATH_ENV] == str(plugin)
    tasks = discover_tasks()
    assert list(tasks) == sorted(tasks) and {"gsm8k", "plugmath"} <= set(tasks)
    spec = get_task("plugmath")
    assert (
        spec.folder == plugin / "tasks" / "plugmath" and spec.package == "autorl.task_code.plugmath"
    )
    assert callable(load_evaluator(spec))
    assert load_task_module(spec, "evaluate.py").__file__ == str(
        plugin / "tasks" / "plugmath" / "evaluate.py"
    )
    assert plugins.task_dirs() == [TASKS_DIR, plugin / "tasks"]
    assert plugins.activate([plugin]) == [plugin]  # idempotent
    assert autorl.task_code.__path__.count(str(plugin / "tasks")) == 1


def test_a_task_id_that_is_taken_is_refused(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    copy_task(first, "gsm8k", "twice")
    copy_task(second, "gsm8k", "twice")
    plugins.activate([first, second])
    with pytest.raises(
        TaskError,
        match=rf"task id 'twice' is in two folders: {first / 'tasks' / 'twice'} "
        rf"and {second / 'tasks' / 'twice'}",
    ):
        discover_tasks()


def test_a_plugin_task_with_autorl_s_id_is_refused(tmp_path: Path) -> None:
    shutil.copytree(
        TASKS_DIR / "gsm8k",
        tmp_path / "p" / "tasks" / "gsm8k",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    plugins.activate([tmp_path / "p"])
    with pytest.raises(
        TaskError,
        match=rf"task id 'gsm8k' is in two folders: {TASKS_DIR / 'gsm8k'} and .*rename one folder",
    ):
        get_task("gsm8k")


def test_task_code_reads_the_plugin_path_when_a_worker_imports_it(tmp_path: Path) -> None:
    """A Ray worker unpickles a reference into a plugin task before anything discovers tasks."""
    plugin = tmp_path / "plugin"
    copy_task(plugin, "gsm8k", "pickled")
    plugins.activate([plugin])
    protocol = load_task_module(get_task("pickled"), "agent/protocol.py")
    blob = pickle.dumps(
        [
            getattr(protocol, name)
            for name in dir(protocol)
            if callable(getattr(protocol, name))
            and getattr(getattr(protocol, name), "__module__", "") == protocol.__name__
        ]
    )
    code = (
        "import pickle, sys; objs = pickle.loads(sys.stdin.buffer.read()); "
        "print(sorted({o.__module__ for o in objs}), sys.modules[objs[0].__module__].__file__)"
    )
    env = dict(os.environ) | {plugins.PLUGIN_PATH_ENV: str(plugin)}
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        input=blob,
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().split() == [
        "['autorl.task_code.pickled.agent.protocol']",
        str(plugin / "tasks" / "pickled" / "agent" / "protocol.py"),
    ]
    env.pop(plugins.PLUGIN_PATH_ENV)
    without = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        input=blob,
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert (
        without.returncode != 0 and b"No module named 'autorl.task_code.pickled'" in without.stderr
    )


def test_plugin_options_are_listed_with_their_origin(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    copy_task(plugin, "webshop", "plugshop")
    (plugin / "conf" / "driver").mkdir(parents=True)
    (plugin / "conf" / "driver" / "mine.yaml").write_text(
        "name: mine\ndescription: My own endpoint\n"
    )
    (plugin / "conf" / "driver" / "_shared.yaml").write_text(
        "gateway: {}\n"
    )  # a base, not an option
    plugins.activate([plugin])
    tasks = {o.name: o for o in list_options("task")}
    assert tasks["plugshop"].plugin == plugin and tasks["gsm8k"].plugin is None
    assert tasks["plugshop"].description.startswith(
        "[L3] Simulated e-commerce shopping"
    )  # from its task.yaml
    drivers = {o.name: o for o in list_options("driver")}
    assert drivers["mine"].description == "My own endpoint" and "_shared" not in drivers
    assert option_file("driver", "mine") == plugin / "conf" / "driver" / "mine.yaml"
    assert option_file("driver", "gpt-5") == CONF_DIR / "driver" / "gpt-5.yaml"
    with pytest.raises(ConfigError, match="unknown driver 'mien'. Did you mean: mine?"):
        option_file("driver", "mien")


def test_an_option_name_that_is_taken_is_refused(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    (plugin / "conf" / "driver").mkdir(parents=True)
    (plugin / "conf" / "driver" / "gpt-5.yaml").write_text("name: gpt-5\n")
    plugins.activate([plugin])
    with pytest.raises(
        ConfigError,
        match=rf"driver=gpt-5 is defined twice: {CONF_DIR / 'driver' / 'gpt-5.yaml'} and "
        rf"{plugin / 'conf' / 'driver' / 'gpt-5.yaml'}",
    ):
        list_options("driver")
    assert "gsm8k" in [o.name for o in list_options("task")]  # other groups are unaffected
    (plugin / "conf" / "task").mkdir()  # a task is its folder: a conf/task/ file would go unread
    with pytest.raises(
        ConfigError, match=r"a task is one folder, tasks/<id>/, and has no conf/task/ file"
    ):
        list_options("task")


def test_a_plugin_conf_folder_holds_only_config_groups(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    (plugin / "conf" / "tasks").mkdir(parents=True)
    plugins.activate([plugin])
    with pytest.raises(
        ConfigError, match=r"conf/ may hold only the config group folders .*found tasks"
    ):
        list_options("task")


def test_the_searchpath_override_adds_plugin_options_to_hydra(tmp_path: Path) -> None:
    """hydra-core 1.3.8's Compose API: a ``hydra.searchpath`` override adds a plugin's group
    options,
    also from a path with a space and a comma, and a plugin option may include a ``_`` base."""
    from hydra import compose, initialize_config_dir

    primary = tmp_path / "conf"
    (primary / "task").mkdir(parents=True)
    (primary / "config.yaml").write_text("defaults:\n  - task: builtin\n  - _self_\n")
    (primary / "task" / "builtin.yaml").write_text("name: builtin\n")
    plugin = tmp_path / "my plugin, v2"
    (plugin / "conf" / "task").mkdir(parents=True)
    (plugin / "conf" / "task" / "_base.yaml").write_text("source: fixture\n")
    (plugin / "conf" / "task" / "mine.yaml").write_text(
        "defaults:\n  - _base\n  - _self_\nname: mine\n"
    )
    overrides = plugins.searchpath_overrides([plugin])
    assert plugins.conf_search_path([plugin]) == [f"file://{plugin}/conf"]
    with initialize_config_dir(config_dir=str(primary), version_base="1.3"):
        assert compose(config_name="config", overrides=[*overrides, "task=mine"])["task"] == {
            "source": "fixture",
            "name": "mine",
        }
        assert compose(config_name="config", overrides=overrides)["task"] == {"name": "builtin"}
    (tmp_path / "code_only").mkdir()
    assert plugins.searchpath_overrides([tmp_path / "code_only"]) == []  # no conf/: nothing to add


def test_plugins_are_read_from_the_command_line() -> None:
    assert plugins.from_overrides(["task=a,b", "plugins=[/x/p,'/my dir/q']", "seed=1"]) == [
        "/x/p",
        "/my dir/q",
    ]
    assert plugins.from_overrides(["++plugins=/x/p"]) == ["/x/p"]
    assert plugins.from_overrides(["plugins=[/x/p]", "~plugins"]) == []
    assert plugins.from_overrides(["task=gsm8k", "plugins_extra=1"]) == []
    with pytest.raises(
        ConfigError, match=r"plugins is a list, not a sweep axis; write plugins=\[/a,/b\]"
    ):
        plugins.from_overrides(["plugins=/a,/b"])
    with pytest.raises(
        ConfigError, match=r"cannot parse 'plugins=\[~/p\]'.*quote a path with spaces or a ~"
    ):
        plugins.from_overrides(["plugins=[~/p]"])
    assert plugins.from_overrides(["plugins=['~/p']"]) == ["~/p"]  # plugin_dirs expands the ~
    with pytest.raises(ConfigError, match="must be folder paths"):
        plugins.from_overrides(["plugins=[1]"])


def test_plugin_modules_are_importable_and_never_shadow_installed_ones(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    (plugin / "plug_agents_x").mkdir(parents=True)
    (plugin / "plug_agents_x" / "__init__.py").write_text("class FooAgent:\n    name = 'foo'\n")
    assert plugins.module_names(plugin) == ["plug_agents_x"]
    plugins.activate([plugin])
    assert load_object("plug_agents_x:FooAgent", what="agent 'foo' adapter").name == "foo"
    assert sys.path[-1] == str(plugin)
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "json.py").write_text("")
    with pytest.raises(
        ConfigError, match=r"its Python module 'json' would shadow the installed module"
    ):
        plugins.activate([shadow])
    twin = tmp_path / "twin"
    shutil.copytree(plugin, twin)
    with pytest.raises(ConfigError, match=r"both have a Python module 'plug_agents_x'"):
        plugins.activate([twin])


def test_workers_get_the_plugins_through_the_runtime_env(tmp_path: Path) -> None:
    assert plugins.runtime_env_vars() == {}
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder in (a, b, c):
        (folder / "tasks").mkdir(parents=True)
    (a / "plug_mod_a.py").write_text("")
    (c / "plug_mod_c.py").write_text("")
    plugins.activate([a, b, c])
    assert plugins.runtime_env_vars() == {
        plugins.PLUGIN_PATH_ENV: os.pathsep.join(map(str, (a, b, c))),
        # expanded by Ray on the worker; b has no Python code, so its tasks/ never imports as
        # ``tasks``
        "PYTHONPATH": f"{a}{os.pathsep}{c}{os.pathsep}${{PYTHONPATH}}",
    }
    assert str(a) in sys.path and str(b) not in sys.path
    assert plugins.runtime_env_vars(dirs=[b]) == {plugins.PLUGIN_PATH_ENV: str(b)}


def test_ls_lists_plugin_tasks_and_where_they_come_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = tmp_path / "plugin"
    copy_task(plugin, "gsm8k", "lsmath")
    assert ls.main(["tasks", "--plugins", str(plugin)]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert (
        lines["lsmath"].endswith(f"(plugin {plugin})")
        and "[L1] Grade-school math" in lines["lsmath"]
    )
    assert "gsm8k" in lines and "(plugin" not in lines["gsm8k"]
    assert ls.main(["tasks", "--plugins", str(tmp_path / "missing")]) == 2
    assert f"error: plugin folder {tmp_path / 'missing'}" in capsys.readouterr().err


def test_ls_reads_the_plugin_path_variable_in_a_fresh_process(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    copy_task(plugin, "alpacaeval", "lsjudged")
    env = dict(os.environ) | {plugins.PLUGIN_PATH_ENV: str(plugin)}
    done = subprocess.run(
        [sys.executable, "-m", "autorl.ls", "tasks"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert any(
        line.startswith("lsjudged ") and line.endswith(f"(plugin {plugin})")
        for line in done.stdout.splitlines()
    )


def test_plugin_support_loads_no_task_code_into_an_agent_process(tmp_path: Path) -> None:
    """The scripted agent imports the registry and refuses to start once autorl.task_code is
    loaded."""
    code = (
        "import sys, autorl.registry, autorl.cluster, agent_kit.scripted.__main__ as m; "
        "m.block_grader_side(); "
        "print(sorted(n for n in sys.modules if n.startswith(('autorl.task_code', "
        "'autorl.tasks'))))"
    )
    copy_task(tmp_path / "plugin", "gsm8k", "agentside")
    env = dict(os.environ) | {
        plugins.PLUGIN_PATH_ENV: str(tmp_path / "plugin")
    }  # set, as in a sweep's workers
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr[-2000:]
