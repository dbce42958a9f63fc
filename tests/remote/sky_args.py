"""Parses argv lists with the real `sky` command line (its click commands),
without running them: an unknown option, a missing value or an unknown
subcommand is an error. Usage: python sky_args.py ARGV.json (a list of
argv lists); prints one JSON line per argv: the command path and params."""
import json
import sys
import warnings

warnings.simplefilter("ignore")
import click  # noqa: E402
from sky.client.cli.command import cli  # noqa: E402

failed = False
for argv in json.load(open(sys.argv[1])):
    try:
        cmd, ctx, path = cli, cli.make_context("sky", list(argv)), ["sky"]
        while isinstance(cmd, click.Group):
            rest = ctx.protected_args + ctx.args
            name, cmd, rest = cmd.resolve_command(ctx, rest)
            path.append(name)
            ctx = cmd.make_context(name, rest, parent=ctx)
        params = {k: v for k, v in ctx.params.items() if v not in (None, False, (), [])}
        print(json.dumps({"path": path, "params": params}, default=str))
    except Exception as e:  # noqa: BLE001
        failed = True
        print(json.dumps({"argv": argv, "error": f"{type(e).__name__}: {e}"}))
sys.exit(1 if failed else 0)
