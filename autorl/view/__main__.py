"""``python -m autorl.view <sweep_dir>``: watch a sweep live in a browser.

Serves a read-only web page over the sweep folder's ``records.sqlite`` (while the sweep runs or
after it): the cells grouped by task × agent × driver, and for each cell its submissions and score
curve, driver calls, code revisions (with their diffs) and the tail of its ``agent.log``. Open
pages update themselves about once a second, without a reload.

It listens on 127.0.0.1 only by default. Another ``--host`` needs ``--token``: then every request
must carry it (open the printed link once; a cookie keeps it).

Examples:
    python -m autorl.view outputs/default
    python -m autorl.view outputs/default --port 8765
    python -m autorl.view outputs/default --host 0.0.0.0 --token "$(openssl rand -hex 16)"
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path
from urllib.parse import quote

from autorl.errors import AutorlError


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    """Run the viewer; returns the exit code (0 stopped, 2 bad arguments or sweep folder)."""
    parser = argparse.ArgumentParser(
        prog="python -m autorl.view",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("sweep_dir", type=Path, help="the sweep folder (holds records.sqlite)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8765, help="port to listen on")
    parser.add_argument("--token", default=None, help="a secret every request must carry")
    args = parser.parse_args(argv)
    if not is_loopback(args.host) and not args.token:
        print(
            f"error: --host {args.host} is not loopback: the viewer shows agents' code and logs to "
            "whoever reaches it, so another host needs --token SECRET",
            file=sys.stderr,
        )
        return 2
    from autorl.view.app import create_app

    try:
        app = create_app(args.sweep_dir, token=args.token)
    except AutorlError as err:
        print(f"error: {err} (pass a sweep folder such as outputs/<sweep_id>)", file=sys.stderr)
        return 2
    import uvicorn

    query = f"/?token={quote(args.token)}" if args.token else "/"
    print(f"Watching {args.sweep_dir} at http://{args.host}:{args.port}{query}", flush=True)
    # Open event streams never end by themselves: on Ctrl-C wait 2 s for them, then close them.
    uvicorn.run(
        app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=2
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
