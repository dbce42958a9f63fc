"""Loads every generated SkyPilot task with the real client library
(`sky.Task.from_yaml`) and compares what SkyPilot read with what vibesys
meant. Usage: python sky_load.py MANIFEST.json; prints one JSON line
{"loaded": N, "failures": [...]} and exits 1 on any failure."""
import json
import sys
import warnings

warnings.simplefilter("ignore")
import sky  # noqa: E402
from sky.utils import registry  # noqa: E402

failures = []
manifest = json.load(open(sys.argv[1]))
for case in manifest:
    want = case["expect"]
    try:
        task = sky.Task.from_yaml(case["file"])
        got = {
            "name": task.name,
            "workdir": task.workdir,
            "run": task.run,
            "envs": dict(task.envs),
        }
        for key in ("name", "workdir", "run", "envs"):
            if got[key] != want[key]:
                raise AssertionError(f"{key}: {got[key]!r} != {want[key]!r}")
        resources = list(task.resources)
        if len(resources) != 1:
            raise AssertionError(f"{len(resources)} resources")
        r = resources[0]
        if want["cloud"] is None:
            if r.cloud is not None:
                raise AssertionError(f"cloud {r.cloud}")
        else:
            cloud = registry.CLOUD_REGISTRY.from_str(want["cloud"])
            if r.cloud is None or not r.cloud.is_same_cloud(cloud):
                raise AssertionError(f"cloud {r.cloud} != {want['cloud']}")
        if r.region != want["region"]:
            raise AssertionError(f"region {r.region!r}")
        acc = want["accelerators"]
        if acc is None:
            if r.accelerators:
                raise AssertionError(f"accelerators {r.accelerators}")
        else:
            name, _, count = acc.partition(":")
            if r.accelerators != {name: int(count or 1)}:
                raise AssertionError(f"accelerators {r.accelerators} != {acc}")
        image = want["image"]
        images = list((r.image_id or {}).values())
        if (image is None and images) or (image is not None and images != [image]):
            raise AssertionError(f"image_id {r.image_id}")
        if bool(r.use_spot) != bool(want["use_spot"]):
            raise AssertionError(f"use_spot {r.use_spot}")
    except BaseException as e:  # noqa: BLE001 - every refusal is a failure
        failures.append({"file": case["file"], "error": f"{type(e).__name__}: {e}"[:500]})
print(json.dumps({"loaded": len(manifest) - len(failures), "failures": failures}))
sys.exit(1 if failures else 0)
