# The vibesys image function: one `derivation` that needs nothing but Nix
# builtins. Its builder is the static vibesys binary, its input the
# references graph (`exportReferencesGraph`) of the image's contents, and its
# output ($out) the image `vibesys image build` writes from the same
# images/*.toml spec that Rust reads.
#
#   import ./image.nix {
#     vibesys = "${vibesysPackage}/bin/vibesys";  # or a builtins.path of a static binary
#     spec = ../images/editor.toml;
#     contents = [ pkgs.bashInteractive pkgs.coreutils ];  # store paths
#   }
#
# Nothing here fetches anything: with a static vibesys and contents already
# in the store it builds offline and in the Nix sandbox (see nix/default.nix
# for that entry point). The digests equal those of `vibesys image build
# SPEC --references-graph GRAPH...` run outside Nix on the same closure with
# the same SOURCE_DATE_EPOCH: the builder is the same program, given the
# same spec and graph, and Nix adds nothing to the image.
{
  # The vibesys executable the build runs: a store path (string with
  # context, e.g. "${pkg}/bin/vibesys", or the result of builtins.path). It
  # must run in the build sandbox, where nothing else is: build it static.
  vibesys,
  # The image spec (images/<name>.toml), a path.
  spec,
  # Store paths (derivations, or builtins.path results) whose closure is the
  # image's content. Each one's references graph is handed to vibesys.
  contents ? [ ],
  # Output format, one of archive, oci, oci-archive, docker-archive. Default:
  # the spec's `format`, else oci-archive.
  format ? null,
  # Seconds since the epoch that every timestamp in the image is clamped
  # to. Default: the spec's `source_date_epoch`, else 1 (1970-01-01T00:00:01Z,
  # as nixpkgs' dockerTools). A string or an integer.
  sourceDateEpoch ? null,
  # The derivation's name. Default: the spec's `name` plus "-image".
  name ? null,
  # The system the builder runs on; vibesys must be built for it.
  system ? builtins.currentSystem,
}:
let
  parsed = builtins.fromTOML (builtins.readFile spec);
  specName = parsed.name or (builtins.replaceStrings [ ".toml" ] [ "" ] (baseNameOf (toString spec)));
  formats = [ "archive" "oci" "oci-archive" "docker-archive" ];
  chosenFormat =
    if format != null then format
    else parsed.format or "oci-archive";
  epoch =
    if sourceDateEpoch != null then toString sourceDateEpoch
    else toString (parsed.source_date_epoch or 1);
  # The spec enters the store under a fixed name, so its store path depends
  # on its bytes only (not on where the checkout lies).
  # A spec that is already a store path (builtins.toFile, a derivation
  # output) is taken as it is.
  specInStore =
    if builtins.isString spec && builtins.hasContext spec then
      spec
    else
      builtins.path {
        path = spec;
        name = "${specName}-spec.toml";
      };
  # exportReferencesGraph takes pairs "file name" "store path"; one graph
  # file per content root, named graph-0, graph-1, ... in the build dir.
  graphNames = builtins.genList (i: "graph-${toString i}") (builtins.length contents);
  graphPairs = builtins.concatLists (
    builtins.genList (i: [ (builtins.elemAt graphNames i) (builtins.elemAt contents i) ]) (builtins.length contents)
  );
  graphArgs = builtins.concatMap (g: [ "--references-graph" g ]) graphNames;
in
assert builtins.isList contents;
assert builtins.elem chosenFormat formats
  || throw "vibesys image ${specName}: unknown format ${chosenFormat}; expected one of ${builtins.concatStringsSep ", " formats}";
assert builtins.match "[0-9]+" epoch != null
  || throw "vibesys image ${specName}: sourceDateEpoch must be a number of seconds, got ${epoch}";
derivation {
  name = if name != null then name else "${specName}-image";
  inherit system;
  builder = vibesys;
  args = [
    "image"
    "build"
    "${specInStore}"
    "--out"
    (builtins.placeholder "out")
    "--format"
    chosenFormat
  ] ++ graphArgs;
  exportReferencesGraph = graphPairs;
  SOURCE_DATE_EPOCH = epoch;
  # Nothing to fetch; building locally is cheaper than a cache round trip.
  preferLocalBuild = true;
  allowSubstitutes = false;
}
