//! `vibesys image push` / `image pull` against a real registry: Debian's
//! `docker-registry` (the distribution registry), started here on
//! 127.0.0.1 with a free port and its own storage, once in plain HTTP
//! and once with TLS (a CA this test makes with openssl) and htpasswd
//! basic auth (bcrypt from `htpasswd -B`). skopeo and the Docker Engine
//! check what was pushed; `image verify` and `docker load` what was
//! pulled.

#[path = "image_support/mod.rs"]
mod image_support;

use std::ffi::OsStr;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use image_support::*;

/// A registry process on loopback; killed (by its own pid) when dropped.
struct Registry {
    child: Child,
    port: u16,
    storage: PathBuf,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Where the registry stores the blob of this hex digest.
    fn blob(&self, hex: &str) -> PathBuf {
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// TLS material and the htpasswd user of a secured registry.
struct Secure {
    ca: PathBuf,
    user: &'static str,
    password: &'static str,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Asserts that `dir` is empty (`case` names the case on failure).
fn assert_nothing_left(dir: &Path, case: &str) {
    let left: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
    assert!(left.is_empty(), "{case}: left behind: {left:?}");
}

/// Runs `cmd`, which must fail as vibesys does; returns its stderr.
fn refused(cmd: &mut Command) -> String {
    fails(cmd.output().unwrap())
}

/// `vibesys image push IMAGE REFERENCE` in `d`.
fn push_cmd(d: &Path, image: impl AsRef<OsStr>, reference: impl AsRef<OsStr>) -> Command {
    let mut c = vibesys(d);
    c.args(["image", "push"]).arg(image).arg(reference);
    c
}

/// `vibesys image pull REFERENCE EXTRA --out OUT` in `d`.
fn pull_cmd(d: &Path, reference: &str, extra: &[&str], out: impl AsRef<OsStr>) -> Command {
    let mut c = vibesys(d);
    c.args(["image", "pull", reference])
        .args(extra)
        .arg("--out")
        .arg(out);
    c
}

/// `vibesys image build SPEC --path BUSYBOX --no-cache --format FORMAT
/// --out OUT` in `d`.
fn build_cmd(d: &Path, spec: impl AsRef<OsStr>, format: &str, out: impl AsRef<OsStr>) -> Command {
    let mut c = vibesys(d);
    c.args(["image", "build"])
        .arg(spec)
        .arg("--path")
        .arg(busybox())
        .args(["--no-cache", "--format", format, "--out"])
        .arg(out);
    c
}

fn run(cmd: &mut Command) -> String {
    ok(cmd.output().unwrap())
}

/// Starts `docker-registry` on 127.0.0.1; with TLS and basic auth when
/// `secure` (returns the CA and credentials).
fn start(secure: bool) -> (Registry, Option<Secure>) {
    require(
        "docker-registry",
        "apt-get install docker-registry (scripts/install-deps.sh)",
    );
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().join("storage");
    std::fs::create_dir(&storage).unwrap();
    let port = free_port();
    let mut extra = String::new();
    let mut sec = None;
    if secure {
        require("openssl", "apt-get install openssl");
        require("htpasswd", "apt-get install apache2-utils");
        let d = dir.path();
        sh(
            d,
            "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=vibesys-test-ca \
               -keyout ca.key -out ca.pem 2>/dev/null && \
             openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 \
               -keyout server.key -out server.csr 2>/dev/null && \
             printf 'subjectAltName=IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\n' > ext && \
             openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
               -days 2 -extfile ext -out server.pem 2>/dev/null && \
             htpasswd -Bbc htpasswd vs-user 'vs pass w0rd' 2>/dev/null",
        );
        extra = format!(
            "  tls:\n    certificate: {d}/server.pem\n    key: {d}/server.key\n\
             auth:\n  htpasswd:\n    realm: vibesys-test\n    path: {d}/htpasswd\n",
            d = d.display()
        );
        sec = Some(Secure {
            ca: d.join("ca.pem"),
            user: "vs-user",
            password: "vs pass w0rd",
        });
    }
    let config = write(
        dir.path(),
        "config.yml",
        &format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
             http:\n  addr: 127.0.0.1:{port}\n{extra}",
            storage.display()
        ),
    );
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let reg = Registry {
        child,
        port,
        storage,
        _dir: dir,
    };
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return (reg, sec);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("docker-registry did not listen on 127.0.0.1:{port}");
}

/// Builds and pins a small busybox image named `name` in `dir`.
fn tiny_image(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let spec = write(
        dir,
        "tiny.toml",
        &TINY_SPEC.replace("name = \"vibesys-tiny\"", &format!("name = \"{name}\"")),
    );
    let archive = dir.join("tiny.tar");
    let lock = dir.join("images.lock");
    ok(vibesys(dir)
        .arg("image")
        .arg("build")
        .arg(&spec)
        .arg("--path")
        .arg(busybox())
        .arg("--out")
        .arg(&archive)
        .arg("--no-cache")
        .output()
        .unwrap());
    pin_image(dir, &archive, &lock);
    (archive, lock)
}

/// [`tiny_image`] of a unique name (`prefix-…`) in a fresh directory, and
/// its repository in `reg`: (directory, name, archive, lock, repository).
fn tiny_for(reg: &Registry, prefix: &str) -> (tempfile::TempDir, String, PathBuf, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let name = unique(prefix);
    let (archive, lock) = tiny_image(dir.path(), &name);
    let repo = format!("127.0.0.1:{}/vs/{name}", reg.port);
    (dir, name, archive, lock, repo)
}

/// A plain HTTP registry ([`start`]) and a [`tiny_for`] it:
/// (registry, directory, name, archive, lock, repository).
fn plain_with_tiny(
    prefix: &str,
) -> (
    Registry,
    tempfile::TempDir,
    String,
    PathBuf,
    PathBuf,
    String,
) {
    let (reg, _) = start(false);
    let (dir, name, archive, lock, repo) = tiny_for(&reg, prefix);
    (reg, dir, name, archive, lock, repo)
}

fn pinned(lock: &Path, name: &str, key: &str) -> String {
    let t: toml::Value = toml::from_str(&std::fs::read_to_string(lock).unwrap()).unwrap();
    t["images"][name][key].as_str().unwrap().to_owned()
}

fn sha256(p: &Path) -> String {
    let out = run(Command::new("sha256sum").arg(p));
    format!("sha256:{}", out.split_whitespace().next().unwrap())
}

fn json_push(
    dir: &Path,
    archive: &Path,
    reference: &str,
    env: &[(&str, &Path)],
    ca: Option<&Path>,
) -> serde_json::Value {
    let mut c = vibesys(dir);
    c.args(["image", "push", "--json"])
        .arg(archive)
        .arg(reference);
    if let Some(ca) = ca {
        c.arg("--ca-file").arg(ca);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    json(&ok(c.output().unwrap()))
}

fn uploaded(report: &serde_json::Value) -> usize {
    report["blobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["action"] == "uploaded")
        .count()
}

#[test]
fn plain_http_push_then_pull_by_digest_gives_back_the_pinned_image() {
    require("skopeo", "apt-get install skopeo");
    let (_reg, dir, name, archive, lock, repo) = plain_with_tiny("vs-reg-tiny");
    let d = dir.path();
    let manifest = pinned(&lock, &name, "manifest_digest");
    let config = pinned(&lock, &name, "config_digest");

    // Push with the lock: prints REPO@manifest digest, records it.
    let out = run(push_cmd(d, &archive, format!("{repo}:t1"))
        .arg("--lock")
        .arg(&lock));
    let reference = format!("{repo}@{manifest}");
    assert_eq!(out.trim(), reference);
    let text = std::fs::read_to_string(&lock).unwrap();
    assert!(
        text.contains(&format!("pushed = [\"{reference}\"]")),
        "{text}"
    );

    // skopeo sees the pinned manifest and config.
    let raw = run(Command::new("skopeo").args([
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{reference}"),
    ]));
    let m = json(&raw);
    assert_eq!(m["config"]["digest"], config.as_str());
    let by_tag = json(&run(Command::new("skopeo").args([
        "inspect",
        "--tls-verify=false",
        &format!("docker://{repo}:t1"),
    ])));
    assert_eq!(by_tag["Digest"], manifest.as_str());

    // A second push uploads no blob.
    let again = json_push(d, &archive, &format!("{repo}:t1"), &[], None);
    assert_eq!(uploaded(&again), 0, "{again:#}");
    assert!(again["blobs"].as_array().unwrap().len() >= 3);

    // Pull by digest: the same bytes as the build, which verify accepts.
    let pulled = d.join("pulled.tar");
    run(&mut pull_cmd(d, &reference, &[], &pulled));
    assert_eq!(sha256(&pulled), sha256(&archive));
    ok(vibesys(d)
        .args(["image", "verify", "--lock"])
        .arg(&lock)
        .arg(&pulled)
        .output()
        .unwrap());
    // As root and as an unprivileged user (no HOME, no credentials: an
    // anonymous pull), into a directory of the user's.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    for who in users() {
        let udir = d.join(format!("as-{who:?}"));
        std::fs::create_dir(&udir).unwrap();
        std::fs::set_permissions(&udir, std::fs::Permissions::from_mode(0o777)).unwrap();
        ok(command_as(
            who,
            &udir,
            Path::new(vibesys_bin()),
            &["image", "pull", &reference, "--out", "p.tar"],
        )
        .output()
        .unwrap());
        assert_eq!(sha256(&udir.join("p.tar")), sha256(&archive), "{who:?}");
    }
    // Every format a build writes comes back the same.
    for (fmt, file) in [
        ("docker-archive", "d.tar"),
        ("oci-archive", "o.tar"),
        ("squashfs", "s.sqfs"),
    ] {
        let built = d.join(format!("built-{file}"));
        run(&mut build_cmd(d, d.join("tiny.toml"), fmt, &built));
        let got = d.join(file);
        ok(vibesys(d)
            .args(["image", "pull", &reference, "--format", fmt, "--out"])
            .arg(&got)
            .output()
            .unwrap());
        assert_eq!(sha256(&got), sha256(&built), "{fmt}");
    }

    // A tag alone is refused; with the lock it must resolve to the pin.
    let err = refused(&mut pull_cmd(
        d,
        &format!("{repo}:t1"),
        &[],
        d.join("x.tar"),
    ));
    assert!(err.contains("pull takes a digest"), "{err}");
    assert!(!d.join("x.tar").exists());
    run(pull_cmd(d, &format!("{repo}:t1"), &[], d.join("x.tar"))
        .arg("--lock")
        .arg(&lock));
    assert_eq!(sha256(&d.join("x.tar")), sha256(&archive));
    // The tag moved to another image: refused, naming both digests.
    let other = d.join("other");
    std::fs::create_dir(&other).unwrap();
    let (other_archive, _) = {
        let spec = TINY_SPEC
            .replace("name = \"vibesys-tiny\"", &format!("name = \"{name}\""))
            .replace("hello from a vibesys image", "another image");
        write(&other, "tiny.toml", &spec);
        let a = other.join("tiny.tar");
        ok(vibesys(&other)
            .args([
                "image",
                "build",
                "tiny.toml",
                "--path",
                busybox(),
                "--no-cache",
                "--out",
            ])
            .arg(&a)
            .output()
            .unwrap());
        (a, ())
    };
    json_push(d, &other_archive, &format!("{repo}:t1"), &[], None);
    let err = refused(
        pull_cmd(d, &format!("{repo}:t1"), &[], d.join("moved.tar"))
            .arg("--lock")
            .arg(&lock),
    );
    assert!(err.contains(&manifest), "{err}");
    assert!(!d.join("moved.tar").exists());
    // Pushing an image the lock does not pin, with the lock: refused.
    let err = refused(
        push_cmd(d, &other_archive, format!("{repo}:t2"))
            .arg("--lock")
            .arg(&lock),
    );
    assert!(err.contains(&config), "{err}");
}

#[test]
fn docker_pulls_by_digest_and_loads_the_pulled_archive_as_the_same_image() {
    require_docker();
    let (_reg, dir, name, archive, lock, repo) = plain_with_tiny("vs-reg-docker");
    let d = dir.path();
    let manifest = pinned(&lock, &name, "manifest_digest");
    let config = pinned(&lock, &name, "config_digest");
    let reference = run(&mut push_cmd(d, &archive, &repo)).trim().to_owned();
    assert_eq!(reference, format!("{repo}@{manifest}"));

    // docker pull by digest (127.0.0.0/8 is an insecure registry to the
    // Engine by default): the image ID is a pinned digest.
    ok(Command::new("docker")
        .args(["pull", "-q", &reference])
        .output()
        .unwrap());
    let id = run(Command::new("docker").args(["image", "inspect", "-f", "{{.Id}}", &reference]));
    let _ = Command::new("docker").args(["rmi", &reference]).output();
    let id = id.trim();
    assert!(
        id == config || id == manifest,
        "{id} is neither {config} nor {manifest}"
    );

    // The pulled archive loads with the same ID.
    let pulled = d.join("pulled.tar");
    run(&mut pull_cmd(d, &reference, &[], &pulled));
    ok(Command::new("docker")
        .arg("load")
        .arg("-i")
        .arg(&pulled)
        .output()
        .unwrap());
    let tag = format!("{name}:t1");
    let loaded = run(Command::new("docker").args(["image", "inspect", "-f", "{{.Id}}", &tag]));
    let _ = Command::new("docker").args(["rmi", &tag]).output();
    assert_eq!(loaded.trim(), id);
}

#[test]
fn a_registry_serving_a_wrong_blob_is_caught_and_nothing_is_left() {
    let (reg, dir, _name, archive, lock, repo) = plain_with_tiny("vs-reg-bad");
    let d = dir.path();
    let report = json_push(d, &archive, &repo, &[], None);
    let reference = report["reference"].as_str().unwrap().to_owned();
    let inspect = json(&ok(vibesys(d)
        .args(["image", "inspect", "--json"])
        .arg(&archive)
        .output()
        .unwrap()));
    let layer = inspect["layers"][0]["digest"].as_str().unwrap().to_owned();
    let _ = lock;
    // Flip one byte of the layer in the registry's own storage.
    let hex = layer.trim_start_matches("sha256:");
    let data = reg.blob(hex);
    let mut bytes = std::fs::read(&data).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&data, &bytes).unwrap();

    let out_dir = d.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    for format in ["archive", "oci"] {
        let err = fails(
            vibesys(d)
                .args(["image", "pull", &reference, "--format", format, "--out"])
                .arg(out_dir.join("pulled"))
                .output()
                .unwrap(),
        );
        assert!(err.contains(&layer), "{err}");
        assert_nothing_left(&out_dir, format);
    }
    // A manifest changed in the registry's storage: refused, naming it.
    let manifest = report["manifest_digest"].as_str().unwrap().to_owned();
    let hex = manifest.trim_start_matches("sha256:");
    let data = reg.blob(hex);
    let text = std::fs::read_to_string(&data).unwrap();
    let changed = text.replacen("\"schemaVersion\":2", "\"schemaVersion\": 2", 1);
    assert_ne!(changed, text, "the manifest was not changed");
    std::fs::write(&data, changed).unwrap();
    let err = refused(&mut pull_cmd(d, &reference, &[], out_dir.join("pulled")));
    // The reference names the manifest's digest whatever went wrong: the
    // digest of the changed bytes shows that they were checked.
    assert!(
        err.contains(&manifest) && err.contains(&sha256(&data)),
        "{err}"
    );
    assert_nothing_left(&out_dir, "");
}

#[test]
fn tls_with_a_test_ca_and_htpasswd_basic_auth() {
    let (reg, sec) = start(true);
    let sec = sec.unwrap();
    let (dir, _name, archive, _lock, repo) = tiny_for(&reg, "vs-reg-tls");
    let d = dir.path();
    let empty_config = d.join("no-credentials");
    std::fs::create_dir(&empty_config).unwrap();

    // Without the CA: the certificate is refused (no fallback to HTTP).
    let err = refused(push_cmd(d, &archive, &repo).env("DOCKER_CONFIG", &empty_config));
    assert!(
        err.to_lowercase().contains("certificate") || err.contains("HTTPS"),
        "{err}"
    );
    // A CA file that holds no certificate (or a broken one) is refused,
    // named, rather than silently dropped.
    for (file, text) in [
        ("empty.pem", "no certificate here\n"),
        (
            "broken.pem",
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
        ),
    ] {
        let bad_ca = write(d, file, text);
        let err = refused(
            push_cmd(d, &archive, &repo)
                .arg("--ca-file")
                .arg(&bad_ca)
                .env("DOCKER_CONFIG", &empty_config),
        );
        assert!(err.contains(file) && err.contains("PEM"), "{err}");
    }
    // With the CA but no credentials: unauthorized.
    let err = refused(
        push_cmd(d, &archive, &repo)
            .arg("--ca-file")
            .arg(&sec.ca)
            .env("DOCKER_CONFIG", &empty_config),
    );
    assert!(err.contains("registry"), "{err}");

    // Docker's config.json `auths`.
    let auths = d.join("auths");
    let token = run(Command::new("sh").arg("-c").arg(format!(
        "printf '%s' '{}:{}' | base64 -w0",
        sec.user, sec.password
    )));
    write(
        &auths,
        "config.json",
        &format!(
            "{{\"auths\":{{\"127.0.0.1:{}\":{{\"auth\":\"{}\"}}}}}}",
            reg.port,
            token.trim()
        ),
    );
    let report = json_push(
        d,
        &archive,
        &format!("{repo}:t1"),
        &[("DOCKER_CONFIG", &auths)],
        Some(&sec.ca),
    );
    assert!(uploaded(&report) >= 3, "{report:#}");
    let reference = report["reference"].as_str().unwrap().to_owned();

    // A credential helper (`credsStore`), as `docker login` sets one up.
    let helpers = d.join("helpers");
    let bin = d.join("bin");
    write(
        &bin,
        "docker-credential-vstest",
        &format!(
            "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread server\n\
             printf '{{\"ServerURL\":\"%s\",\"Username\":\"{}\",\"Secret\":\"{}\"}}' \"$server\"\n",
            sec.user, sec.password
        ),
    );
    sh(&bin, "chmod 755 docker-credential-vstest");
    write(&helpers, "config.json", "{\"credsStore\":\"vstest\"}");
    let pulled = d.join("pulled.tar");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    ok(vibesys(d)
        .args(["image", "pull", &reference, "--ca-file"])
        .arg(&sec.ca)
        .arg("--out")
        .arg(&pulled)
        .env("DOCKER_CONFIG", &helpers)
        .env("PATH", path)
        .output()
        .unwrap());
    assert_eq!(sha256(&pulled), sha256(&archive));
}

#[test]
fn run_env_show_says_when_the_service_image_is_not_in_a_registry() {
    let (_reg, dir, _name, archive, lock, repo) = plain_with_tiny("vs-reg-remote");
    let d = dir.path();
    let show = |toml: &str| {
        write(d, "vibesys.toml", toml);
        json(&ok(vibesys(d)
            .args(["run-env", "show", "--json"])
            .output()
            .unwrap()))
    };
    let image = |v: &serde_json::Value, env: &str| {
        v["environments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == env)
            .unwrap()["image"]
            .clone()
    };
    let eval = "[check]\nargv = [\"true\"]\n[measure]\nargv = [\"true\"]\n";
    // No image: the service's default, not the pinned one.
    let v = show(eval);
    assert_eq!(image(&v, "modal")["by_digest"], false);
    assert!(
        image(&v, "modal")["note"]
            .as_str()
            .unwrap()
            .contains("not in a registry")
    );
    assert!(image(&v, "docker").is_null());
    // A tag: not pinned.
    let v = show(&format!("{eval}[modal]\nimage = \"{repo}:t1\"\n"));
    assert!(
        image(&v, "modal")["note"]
            .as_str()
            .unwrap()
            .contains("not pinned by digest")
    );
    // The reference push prints: by digest, for both services.
    let pushed = run(push_cmd(d, &archive, format!("{repo}:t1"))
        .arg("--lock")
        .arg(&lock));
    let pushed = pushed.trim();
    let v = show(&format!(
        "{eval}[modal]\nimage = \"{pushed}\"\n[skypilot]\nimage = \"docker:{pushed}\"\n"
    ));
    for env in ["modal", "skypilot"] {
        assert_eq!(image(&v, env)["by_digest"], true, "{v:#}");
    }
}

/// The end of the Python scripts below: writes the uncompressed `layer`
/// they built as the one image (named `name`) of an OCI layout at `out`;
/// prints its manifest digest.
const WRITE_LAYOUT: &str = r#"
layer = buf.getvalue()
def put(b):
    d = hashlib.sha256(b).hexdigest()
    os.makedirs(out + "/blobs/sha256", exist_ok=True)
    open(out + "/blobs/sha256/" + d, "wb").write(b)
    return "sha256:" + d
ld = put(layer)
config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [ld]}}).encode()
cd = put(config)
manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
  "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": len(config)},
  "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld, "size": len(layer)}]}).encode()
md = put(manifest)
open(out + "/oci-layout", "w").write('{"imageLayoutVersion":"1.0.0"}')
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
  "digest": md, "size": len(manifest), "annotations": {"io.containerd.image.name": name}}]},
  open(out + "/index.json", "w"))
print(md)
"#;

/// Runs the Python script `head` (which builds `layer` and sets `out`
/// and `name`), then [`WRITE_LAYOUT`], with `args`; returns its output.
fn python_layout(head: &str, args: &[&std::ffi::OsStr]) -> String {
    run(Command::new("python3")
        .arg("-c")
        .arg(format!("{head}{WRITE_LAYOUT}"))
        .args(args))
}

/// An OCI layout whose one layer holds `evil -> /` and then
/// `evil/pwned-<unique>`: unpacked naively, it writes outside the rootfs.
const HOSTILE_LAYOUT: &str = r#"
import hashlib, io, json, os, sys, tarfile
out, victim = sys.argv[1], sys.argv[2]
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
    s = tarfile.TarInfo("evil"); s.type = tarfile.SYMTYPE; s.linkname = os.path.dirname(victim)
    t.addfile(s)
    data = b"written through a symlink\n"
    f = tarfile.TarInfo("evil/" + os.path.basename(victim)); f.size = len(data)
    t.addfile(f, io.BytesIO(data))
name = "hostile:t"
"#;

#[test]
fn a_hostile_layer_cannot_write_outside_the_squashfs_rootfs() {
    require("python3", "apt-get install python3");
    let (reg, _) = start(false);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let victim = std::env::temp_dir().join(unique("vs-reg-victim"));
    let layout = d.join("hostile");
    let digest = python_layout(HOSTILE_LAYOUT, &[layout.as_os_str(), victim.as_os_str()]);
    let repo = format!("127.0.0.1:{}/vs/{}", reg.port, unique("hostile"));
    let pushed = run(&mut push_cmd(d, &layout, &repo));
    assert_eq!(pushed.trim(), format!("{repo}@{}", digest.trim()));
    let out_dir = d.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let err = refused(&mut pull_cmd(
        d,
        pushed.trim(),
        &["--format", "squashfs"],
        out_dir.join("h.sqfs"),
    ));
    assert!(err.contains("symlink"), "{err}");
    assert!(!victim.exists(), "{} was written", victim.display());
    assert_nothing_left(&out_dir, "");
}

#[test]
fn a_push_to_a_second_repository_mounts_the_blobs_the_lock_saw_pushed() {
    let (reg, dir, name, archive, lock, _) = plain_with_tiny("vs-reg-mount");
    let d = dir.path();
    let push = |repo: &str| {
        json(&ok(vibesys(d)
            .args(["image", "push", "--json"])
            .arg(&archive)
            .arg(repo)
            .arg("--lock")
            .arg(&lock)
            .output()
            .unwrap()))
    };
    let first = format!("127.0.0.1:{}/team-a/{name}", reg.port);
    let second = format!("127.0.0.1:{}/team-b/{name}", reg.port);
    assert!(uploaded(&push(&first)) >= 3);
    let report = push(&second);
    assert_eq!(uploaded(&report), 0, "{report:#}");
    let blobs = report["blobs"].as_array().unwrap();
    assert!(blobs.iter().all(|b| b["action"] == "mounted"), "{report:#}");
    let text = std::fs::read_to_string(&lock).unwrap();
    assert!(text.contains(&first) && text.contains(&second), "{text}");
    // The docker-archive has no OCI manifest: refused, naming what to push.
    let docker = d.join("d.tar");
    run(&mut build_cmd(
        d,
        d.join("tiny.toml"),
        "docker-archive",
        &docker,
    ));
    let err = refused(&mut push_cmd(d, &docker, &first));
    assert!(err.contains("docker-archive"), "{err}");
}

/// An image whose modes deny their owner: a directory made 0555 after a
/// file went into it, a 0000 file with content; `.wh...` for the
/// whiteout case.
const MODES_LAYOUT: &str = r#"
import hashlib, io, json, os, sys, tarfile
out, case = sys.argv[1], sys.argv[2]
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
    def add(name, mode, data=None):
        i = tarfile.TarInfo(name); i.mode = mode
        if data is None:
            i.type = tarfile.DIRTYPE; t.addfile(i)
        else:
            i.size = len(data); t.addfile(i, io.BytesIO(data))
    if case == "modes":
        add("ro", 0o755); add("ro/f", 0o644, b"inside\n"); add("ro", 0o555)
        add("ro/late", 0o644, b"after the chmod\n"); add("zero", 0, b"kept\n")
    else:
        add("a", 0o755); add("a/f", 0o644, b"f\n"); add("a/.wh...", 0o644, b"")
name = "modes:t"
"#;

#[test]
fn a_squashfs_pull_keeps_modes_that_deny_their_owner_as_root_and_as_a_user() {
    require("python3", "apt-get install python3");
    require("unsquashfs", "apt-get install squashfs-tools");
    let (reg, _) = start(false);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let push = |case: &str| {
        let layout = d.join(case);
        python_layout(MODES_LAYOUT, &[layout.as_os_str(), case.as_ref()]);
        let repo = format!("127.0.0.1:{}/vs/{}", reg.port, unique(case));
        let pushed = run(&mut push_cmd(d, &layout, &repo));
        pushed.trim().to_owned()
    };
    let modes = push("modes");
    let whiteout = push("whiteout");
    // The test user writes here (the temporary directory is 0700).
    let out_tmp = tempfile::Builder::new()
        .prefix("vs-reg-modes")
        .tempdir()
        .unwrap();
    let out_dir = out_tmp.path().to_owned();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut images = Vec::new();
    for who in users() {
        let out = out_dir.join(format!("{who:?}.sqfs"));
        let pull = |reference: &str| {
            command_as(
                who,
                &out_dir,
                Path::new(vibesys_bin()),
                &["image", "pull", reference, "--format", "squashfs", "--out"],
            )
            .arg(&out)
            .output()
            .unwrap()
        };
        ok(pull(&modes));
        let listing = run(Command::new("unsquashfs").arg("-lls").arg(&out));
        for (mode, path) in [
            ("dr-xr-xr-x", "squashfs-root/ro\n"),
            ("-rw-r--r--", "squashfs-root/ro/late\n"),
            ("----------", "squashfs-root/zero\n"),
        ] {
            assert!(
                listing
                    .lines()
                    .any(|l| l.starts_with(mode) && format!("{l}\n").ends_with(path)),
                "{who:?}: {mode} {path}: {listing}"
            );
        }
        let zero = run(Command::new("unsquashfs").arg("-cat").arg(&out).arg("zero"));
        assert_eq!(zero, "kept\n", "{who:?}");
        images.push(std::fs::read(&out).unwrap());
        // A whiteout that names the directory's parent is refused.
        let err = fails(pull(&whiteout));
        assert!(err.contains("whiteout"), "{who:?}: {err}");
    }
    assert!(
        images.windows(2).all(|w| w[0] == w[1]),
        "root and user differ"
    );
    let mut left: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".sqfs"))
        .collect();
    left.sort();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A TCP proxy on 127.0.0.1 that passes the upstream's answers on at
/// about 256 KiB/s; prints its port.
const SLOW_PROXY: &str = r#"
import socket, sys, threading, time
up = int(sys.argv[1])
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(8)
print(srv.getsockname()[1], flush=True)
def pipe(a, b, slow):
    try:
        while True:
            d = a.recv(16384)
            if not d: break
            b.sendall(d)
            if slow: time.sleep(0.06)
    except OSError: pass
    for s in (a, b):
        try: s.shutdown(socket.SHUT_RDWR)
        except OSError: pass
while True:
    c, _ = srv.accept()
    u = socket.create_connection(("127.0.0.1", up))
    threading.Thread(target=pipe, args=(c, u, False), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c, True), daemon=True).start()
"#;

#[test]
fn an_interrupted_pull_leaves_nothing_behind() {
    require("python3", "apt-get install python3");
    let (reg, dir, _name, archive, _lock, repo) = plain_with_tiny("vs-reg-int");
    let d = dir.path();
    let report = json_push(d, &archive, &repo, &[], None);
    /// Killed (by its own pid) when dropped, also when the test fails.
    struct Proxy(Child);
    impl Drop for Proxy {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut proxy = Proxy(
        Command::new("python3")
            .arg("-c")
            .arg(SLOW_PROXY)
            .arg(reg.port.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut port = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(proxy.0.stdout.as_mut().unwrap()),
        &mut port,
    )
    .unwrap();
    let reference = report["reference"]
        .as_str()
        .unwrap()
        .replace(&format!(":{}/", reg.port), &format!(":{}/", port.trim()));
    let out_dir = d.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let pull = pull_cmd(d, &reference, &[], out_dir.join("pulled.tar"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the layer is on its way (the stage exists), SIGINT.
    let t0 = std::time::Instant::now();
    while std::fs::read_dir(&out_dir).unwrap().next().is_none() {
        assert!(t0.elapsed().as_secs() < 30, "the pull never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    run(Command::new("kill").args(["-INT", &pull.id().to_string()]));
    let out = pull.wait_with_output().unwrap();
    drop(proxy);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_nothing_left(&out_dir, "");
}

/// A referrers tag the registry fails to serve (its storage link broken:
/// a 5xx, not a 404) fails the push, naming it, instead of being replaced
/// by a fresh index that would drop the image's other referrers.
#[test]
fn a_referrers_tag_the_registry_fails_to_serve_is_not_replaced() {
    let (reg, dir, name, archive, _lock, repo) = plain_with_tiny("vs-reg-ref");
    let d = dir.path();
    let report = json_push(d, &archive, &repo, &[], None);
    let manifest = report["manifest_digest"].as_str().unwrap();
    let tag = format!("sha256-{}", manifest.trim_start_matches("sha256:"));
    let link = reg
        .storage
        .join("docker/registry/v2/repositories/vs")
        .join(&name)
        .join("_manifests/tags")
        .join(&tag)
        .join("current/link");
    assert!(link.is_file(), "the first push left no referrers tag");
    std::fs::write(&link, "not-a-digest").unwrap();
    let err = refused(&mut push_cmd(d, &archive, &repo));
    assert!(err.contains(&tag), "{err}");
    assert_file_is(&link, "not-a-digest");
}
