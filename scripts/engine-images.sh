#!/usr/bin/env bash
# The Docker Engine's images before and after the test suite: the suite must
# leave every image the Engine held before it loaded, under the same tags
# (a developer running it on a workstation keeps the images they use).
#
#   scripts/engine-images.sh snapshot FILE   record the images in FILE
#   scripts/engine-images.sh compare FILE    fail, naming them, when an image
#                                            of FILE is gone or one of its
#                                            tags names another image now
#
# Images whose every tag is a test's unique name (`<prefix>-<pid>-<n>-<ns>`,
# tests/common `unique`) belong to test runs (another checkout's suite may
# run at the same time) and are not compared. Without a reachable Engine the
# snapshot is empty and the comparison says so.
set -euo pipefail

list() {
    docker image ls --all --digests --no-trunc \
        --format '{{.ID}}	{{.Repository}}:{{.Tag}}	{{.Digest}}' 2>/dev/null
}

case "${1:-}" in
snapshot)
    [ $# -eq 2 ] || { echo "usage: $0 snapshot FILE" >&2; exit 2; }
    if ! list >"$2"; then
        echo "engine-images: the Docker Engine does not answer; nothing recorded" >&2
        : >"$2"
    fi
    ;;
compare)
    [ $# -eq 2 ] || { echo "usage: $0 compare FILE" >&2; exit 2; }
    if [ ! -s "$2" ]; then
        echo "engine-images: no images were recorded before the suite; nothing to compare" >&2
        exit 0
    fi
    after=$(mktemp)
    trap 'rm -f "$after"' EXIT
    list >"$after" || {
        echo "engine-images: error: the Docker Engine does not answer after the suite" >&2
        exit 1
    }
    python3 - "$2" "$after" <<'EOF'
import re, sys

UNIQUE = re.compile(r"-[0-9]+-[0-9]+-[0-9]+$")


def read(path):
    ids, tags = {}, {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 2:
                continue
            image_id, ref = parts[0], parts[1]
            ids.setdefault(image_id, set())
            if "<none>" not in ref:
                ids[image_id].add(ref)
                tags[ref] = image_id
    return ids, tags


def a_tests_own(refs):
    return bool(refs) and all(UNIQUE.search(r.rsplit(":", 1)[0]) for r in refs)


before_ids, before_tags = read(sys.argv[1])
after_ids, after_tags = read(sys.argv[2])
problems = []
for image_id, refs in sorted(before_ids.items()):
    if a_tests_own(refs):
        continue
    if image_id not in after_ids:
        named = ", ".join(sorted(refs)) or "untagged"
        problems.append(f"image {image_id} ({named}) is gone")
for ref, image_id in sorted(before_tags.items()):
    if a_tests_own({ref}) or image_id not in after_ids:
        continue
    now = after_tags.get(ref)
    if now != image_id:
        problems.append(f"tag {ref} named {image_id}, now {now or 'nothing'}")
if problems:
    print("engine-images: error: the test suite changed images the Docker Engine held before it ran:", file=sys.stderr)
    for p in problems:
        print(f"  {p}", file=sys.stderr)
    sys.exit(1)
print(f"engine-images: all {len(before_ids)} images the Engine held before the suite are still loaded, under the same tags", file=sys.stderr)
EOF
    ;;
*)
    echo "usage: $0 snapshot FILE | compare FILE" >&2
    exit 2
    ;;
esac
