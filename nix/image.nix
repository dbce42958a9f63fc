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
# SPEC --references-graph GRAPH` run outside Nix on the same closure with
# the same SOURCE_DATE_EPOCH: the builder is the same program, given the
# same spec and graph, and Nix adds nothing to the image.
#
# Nix writes the graph file; vibesys runs in the build directory and reads
# it from there (`--references-graph closure-graph`).
{
  # The vibesys executable the build runs: a store path (string with
  # context, e.g. "${pkg}/bin/vibesys", or the result of builtins.path). It
  # must run in the build sandbox, where nothing else is: build it static.
  vibesys,
  # The image spec (images/<name>.toml), a path.
  spec,
  # Store paths whose closure is the image's content: one store path of
  # any kind (a derivation such as a buildEnv, a builtins.path result), or
  # several sources (builtins.path results) that are not derivation outputs.
  contents,
  # Output format: oci-archive (default), archive (OCI layout and Docker
  # manifest.json in one tar: `docker load` takes it), oci (a directory),
  # docker-archive, or squashfs (needs `mksquashfs` from `tools`).
  format ? "oci-archive",
  # Seconds since the epoch that every timestamp in the image is clamped
  # to (SOURCE_DATE_EPOCH); an integer or a string of digits. The default,
  # 1, is 1970-01-01T00:00:01Z as in nixpkgs' dockerTools.
  sourceDateEpoch ? 1,
  # Layer compression: none (default), gzip or zstd.
  compression ? "none",
  # Symlinks from the image's usual places into the content root, as an
  # attribute set { "/image/path" = "path/under/root"; }, e.g.
  # { "/bin" = "bin"; "/usr/bin" = "bin"; } for a buildEnv root, so that
  # the spec's `/bin/sh` and PATH work. They are appended to the spec as
  # `[[files]]` symlinks (the spec's `[[host.files]]` play that part
  # without Nix); the spec the builder reads is then a derived one, in the
  # store and named in the derivation's `spec` attribute.
  links ? { },
  # Store paths whose bin/ directories form the builder's PATH: only
  # squashfs needs one (squashfs-tools, for mksquashfs).
  tools ? [ ],
  # The derivation's name. Default: the spec's `name` plus "-image".
  name ? null,
  # The system the builder runs on; vibesys must be built for it.
  system ? builtins.currentSystem,
}:
let
  parsed = builtins.fromTOML (builtins.readFile spec);
  # Store path names allow no "/" (image names may have one: "vibesys/editor").
  specName = builtins.replaceStrings [ "/" ] [ "-" ] (
    parsed.name or (builtins.replaceStrings [ ".toml" ] [ "" ] (baseNameOf (toString spec)))
  );
  formats = [
    "archive"
    "oci"
    "oci-archive"
    "docker-archive"
    "squashfs"
  ];
  epoch = toString sourceDateEpoch;
  # The spec enters the store under a fixed name, so its store path depends
  # on its bytes only (not on where the checkout lies). A spec that is
  # already a store path (builtins.toFile, a derivation output) is taken as
  # it is.
  givenSpec =
    if builtins.isString spec && builtins.hasContext spec then
      spec
    else
      builtins.path {
        path = spec;
        name = "${specName}-spec.toml";
      };
  # vibesys reads one references graph. exportReferencesGraph writes one
  # graph per store path, so several contents get one root: a text file
  # naming them (builtins.toFile may refer to sources such as builtins.path
  # results, not to derivation outputs: give a single root, e.g. nixpkgs'
  # buildEnv, for those). One content is its own root.
  root =
    if builtins.length contents == 1 then
      builtins.head contents
    else
      builtins.toFile "${specName}-contents" (builtins.concatStringsSep "\n" (map toString contents) + "\n");
  # The link targets are plain text in the spec (the closure already holds
  # the root), so the derived spec can be a builtins.toFile.
  rootText = builtins.unsafeDiscardStringContext (toString root);
  linkEntry = p: ''

    [[files]]
    path = "${p}"
    type = "symlink"
    target = "${rootText}/${links.${p}}"
  '';
  specInStore =
    if links == { } then
      givenSpec
    else
      builtins.toFile "${specName}-spec.toml" (
        builtins.readFile spec + builtins.concatStringsSep "" (map linkEntry (builtins.attrNames links))
      );
in
assert builtins.isList contents && contents != [ ]
  || throw "vibesys image ${specName}: contents must be a non-empty list of store paths";
assert builtins.elem format formats
  || throw "vibesys image ${specName}: unknown format ${format}; expected one of ${builtins.concatStringsSep ", " formats}";
assert builtins.elem compression [
  "none"
  "gzip"
  "zstd"
]
  || throw "vibesys image ${specName}: unknown compression ${compression}; expected none, gzip or zstd";
assert format != "squashfs" || tools != [ ]
  || throw "vibesys image ${specName}: the squashfs format needs mksquashfs: pass tools = [ squashfsTools ]";
assert builtins.match "[0-9]+" epoch != null
  || throw "vibesys image ${specName}: sourceDateEpoch must be a number of seconds, got ${epoch}";
(derivation {
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
    format
    "--compression"
    compression
    "--references-graph"
    "closure-graph"
    # A layer cache inside a build sandbox is never reused.
    "--no-cache"
  ];
  exportReferencesGraph = [
    "closure-graph"
    root
  ];
  SOURCE_DATE_EPOCH = epoch;
  PATH = builtins.concatStringsSep ":" (map (t: "${t}/bin") tools);
  # Nothing to fetch; building locally is cheaper than a cache round trip.
  preferLocalBuild = true;
  allowSubstitutes = false;
})
// {
  # The spec the builder read, and the root whose closure is the content:
  # what `vibesys image build SPEC --references-graph GRAPH` needs to give
  # the same digests outside Nix.
  spec = specInStore;
  inherit root;
}
