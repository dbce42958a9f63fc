{
  # Everything below that names `pkgs` or `nixpkgs` needs nixpkgs, which no
  # machine of this project can fetch: those parts are checked here with
  # `nix-instantiate --parse` only. docs/install.md lists the commands a
  # user with network access runs to check them (`nix flake check`,
  # `nix build .#editor-image`, `nix run .#vibesys -- --version`). The image
  # function itself (nix/image.nix) needs only builtins and is built and run
  # end to end by tests/nix_image.rs.
  description = "vibesys: confinement and hermetic images for AI coding agents";

  # nixpkgs alone: every extra input is one more pin nobody here can verify.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];

      version = (builtins.fromTOML (builtins.readFile ./Cargo.toml)).workspace.package.version;

      # The sources cargo needs, and nothing else, so editing docs or nix/
      # does not rebuild vibesys. tests/ (the end-to-end tests) is a
      # workspace member: cargo cannot load the workspace without it, even
      # to build only vibesys.
      src = lib.fileset.toSource {
        root = ./.;
        fileset = lib.fileset.unions [
          ./Cargo.toml
          ./Cargo.lock
          ./crates
          ./tests
          (lib.fileset.maybeMissing ./images)
        ];
      };

      # Image specs: images/<name>.toml for each image the flake exposes.
      imageNames = [
        "editor"
        "agent"
        "evaluator-tool"
      ];

      perSystem =
        system: pkgs:
        let
          # The static (musl) host binary, built by nixpkgs' own Rust
          # tooling; each crate is fetched by the checksum in Cargo.lock.
          vibesys = pkgs.pkgsStatic.rustPlatform.buildRustPackage {
            pname = "vibesys";
            inherit version src;
            cargoLock.lockFile = ./Cargo.lock;
            cargoBuildFlags = [
              "-p"
              "vibesys"
            ];
            # The test suite runs in checks.tests (unit tests) and in CI
            # (integration tests that need Docker, Nix, bubblewrap).
            doCheck = false;
            meta = {
              description = "Confinement and hermetic images for AI coding agents";
              mainProgram = "vibesys";
              license = lib.licenses.asl20;
              platforms = lib.platforms.linux;
            };
          };
          vibesysExe = lib.getExe vibesys;

          # A spec's `nix.packages` are nixpkgs attribute paths ("git",
          # "nodePackages.npm"); "vibesys" is this flake's own package.
          resolvePackage =
            specName: attr:
            if attr == "vibesys" then
              vibesys
            else
              lib.attrByPath (lib.splitString "." attr) (throw "images/${specName}.toml: nixpkgs has no package `${attr}` (nix.packages)") pkgs;

          # One image from images/<specName>.toml. vibesys reads one
          # references graph, so the packages get one root: a buildEnv of
          # them (its bin/ holds every package's commands). /bin and
          # /usr/bin link to that bin/ so the spec's /bin/sh, PATH and
          # `#!/usr/bin/env` work; /etc/ssl to the CA bundle (cacert).
          mkImage =
            specName: extra:
            let
              spec = ./images + "/${specName}.toml";
              parsed = builtins.fromTOML (builtins.readFile spec);
            in
            import ./nix/image.nix (
              {
                vibesys = vibesysExe;
                inherit spec system;
                contents = [
                  (pkgs.buildEnv {
                    name = "${specName}-env";
                    paths = map (resolvePackage specName) (parsed.nix.packages or [ ]);
                  })
                ];
                links = {
                  "/bin" = "bin";
                  "/usr/bin" = "bin";
                }
                // lib.optionalAttrs (builtins.elem "cacert" (parsed.nix.packages or [ ])) {
                  "/etc/ssl" = "etc/ssl";
                };
              }
              // extra
            );

          # <name>-image: oci-archive; <name>-squashfs: a flattened rootfs
          # for enroot and Charliecloud.
          images = lib.listToAttrs (
            lib.concatMap (n: [
              {
                name = "${n}-image";
                value = mkImage n { };
              }
              {
                name = "${n}-squashfs";
                value = mkImage n {
                  format = "squashfs";
                  tools = [ pkgs.squashfsTools ];
                  name = "${n}-squashfs";
                };
              }
            ]) imageNames
          );
        in
        {
          packages = images // {
            inherit vibesys;
            default = vibesys;
          };

          apps = rec {
            vibesys = {
              type = "app";
              program = vibesysExe;
              meta.description = "Run vibesys";
            };
            default = vibesys;
          };

          devShells.default = pkgs.mkShell {
            packages = with pkgs; [
              cargo
              rustc
              clippy
              rustfmt
              rust-analyzer
              musl
              skopeo
              umoci
              crun
              bubblewrap
              squashfsTools
              pkgsStatic.busybox
            ];
          };

          checks = {
            # The unit tests of every crate (`cargo test --lib --bins`). The
            # integration tests need Docker, Nix, bubblewrap: none of them is
            # in a Nix build sandbox, so CI runs those.
            tests = vibesys.overrideAttrs (_: {
              pname = "vibesys-tests";
              doCheck = true;
              cargoTestFlags = [
                "--workspace"
                "--lib"
                "--bins"
              ];
            });
            fmt = pkgs.runCommand "vibesys-fmt" { nativeBuildInputs = [ pkgs.cargo pkgs.rustfmt ]; } ''
              export HOME=$TMPDIR CARGO_HOME=$TMPDIR/cargo
              cd ${src}
              cargo fmt --all --check
              touch $out
            '';
            # The image function end to end with nixpkgs contents: a static
            # busybox in an oci-archive, built by the static vibesys.
            image-busybox = import ./nix/image.nix {
              vibesys = vibesysExe;
              spec = builtins.toFile "busybox.toml" ''
                name = "busybox"
              '';
              inherit system;
              contents = [ pkgs.pkgsStatic.busybox ];
              sourceDateEpoch = 1;
            };
          }
          // images;
        };

      # claude-code (the agent image's nix.packages) is unfree: allowed by
      # name, nothing else unfree is.
      bySystem = lib.genAttrs systems (
        system:
        perSystem system (
          import nixpkgs {
            inherit system;
            config.allowUnfreePredicate = pkg: builtins.elem (lib.getName pkg) [ "claude-code" ];
          }
        )
      );
    in
    {
      packages = lib.mapAttrs (_: s: s.packages) bySystem;
      apps = lib.mapAttrs (_: s: s.apps) bySystem;
      devShells = lib.mapAttrs (_: s: s.devShells) bySystem;
      checks = lib.mapAttrs (_: s: s.checks) bySystem;

      # The builtins-only image function, for other flakes:
      #   vibesys.lib.image { vibesys = ...; spec = ./my.toml; contents = [ ... ]; }
      lib.image = import ./nix/image.nix;
    };
}
