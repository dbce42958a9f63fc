"""Imports a generated Modal module with the real `modal` package and
reports what it defines. The real decorators and image constructors run;
they are wrapped only to record the arguments they were given.
Usage: python modal_spy.py MODULE.py [WORKDIR]; prints one JSON object.
With WORKDIR, also runs the function's body here (`evaluate.local()`,
modal's own local call) on WORKDIR in place of the container's checkout."""
import importlib.util
import json
import sys
import warnings

warnings.simplefilter("ignore")
import modal  # noqa: E402

seen = {"function": [], "from_registry": [], "debian_slim": []}
real_function = modal.App.function
real_from_registry = modal.Image.from_registry
real_debian_slim = modal.Image.debian_slim


def function(self, *args, **kwargs):
    seen["function"].append({"gpu": kwargs.get("gpu"), "timeout": kwargs.get("timeout")})
    return real_function(self, *args, **kwargs)


def from_registry(*args, **kwargs):
    seen["from_registry"].append(args[0] if args else kwargs.get("tag"))
    return real_from_registry(*args, **kwargs)


def debian_slim(*args, **kwargs):
    seen["debian_slim"].append(kwargs.get("python_version"))
    return real_debian_slim(*args, **kwargs)


modal.App.function = function
modal.Image.from_registry = from_registry
modal.Image.debian_slim = debian_slim

spec = importlib.util.spec_from_file_location("generated", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
functions = module.app.registered_functions
seen["app"] = module.app.name
seen["functions"] = sorted(functions)
seen["entrypoints"] = sorted(module.app.registered_entrypoints)
seen["gpus"] = {name: f._spec_.gpus for name, f in functions.items()}
seen["is_modal_function"] = {name: isinstance(f, modal.Function) for name, f in functions.items()}
if len(sys.argv) > 2:
    module.REMOTE_WORKDIR = sys.argv[2]
    seen["local_result"] = functions["evaluate"].local()
print(json.dumps(seen))
