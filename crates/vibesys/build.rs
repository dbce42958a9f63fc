//! Link options of the `vibesys` binary.
//!
//! The static (musl) build is a static-pie: its ~20,000 relative
//! relocations are applied by musl's start-up code on every launch. Packed
//! as `DT_RELR` (`-z pack-relative-relocs`, GNU ld 2.38+, lld 15+; musl
//! 1.2.4+ applies them) their table shrinks from ~470 KiB to ~6 KiB, so a
//! launch reads 8 fewer pages. Other targets keep their linker's default:
//! a glibc binary with `DT_RELR` would need glibc 2.36 to start.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "musl" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
