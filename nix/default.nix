# Offline entry point for the image function: everything comes from host
# paths, added to the store with builtins.path, so it needs no nixpkgs and
# no network. Used by tests/nix_image.rs; handy for HPC
# sites with a Nix but no binary cache.
#
#   nix-build nix --option sandbox true \
#     --arg vibesys ./target/x86_64-unknown-linux-musl/release/vibesys \
#     --arg spec ./images/editor.toml \
#     --arg contents '[ /path/to/rootdir ]' \
#     --argstr sourceDateEpoch 1700000000
#
# `vibesys` must be a static executable (scripts/build-static.sh): the build
# sandbox holds nothing but the store paths named here.
{
  # Path of the static vibesys binary on the host.
  vibesys,
  # Path of the image spec (images/<name>.toml).
  spec,
  # Host paths (files or directories) to add to the store, each as one
  # store path named after its base name; their closure is the content.
  # Store paths already in the store are taken as they are.
  contents,
  format ? "oci-archive",
  compression ? "none",
  links ? { },
  sourceDateEpoch ? 1,
  name ? null,
  system ? builtins.currentSystem,
}:
let
  storePrefix = "${builtins.storeDir}/";
  isInStore = s: builtins.substring 0 (builtins.stringLength storePrefix) s == storePrefix;
  addToStore =
    p:
    let
      s = toString p;
    in
    if builtins.isString p && builtins.hasContext p then
      p
    else if isInStore s then
      builtins.storePath s
    else
      builtins.path {
        path = p;
        name = baseNameOf s;
      };
in
import ./image.nix {
  vibesys = builtins.path {
    path = vibesys;
    name = "vibesys";
  };
  inherit spec format compression links sourceDateEpoch name system;
  contents = map addToStore contents;
}
