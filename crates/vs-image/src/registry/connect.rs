//! A connection to one registry: TLS (the system's roots plus
//! `--ca-file`, rustls with ring), plain HTTP only where allowed, the
//! credentials, and the first authentication.

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, RegistryOperation};

use super::reference::ImageRef;
use super::{RegistryOptions, auth};
use crate::error::Error;

/// A client bound to one registry, authenticated for one repository.
pub(crate) struct Conn {
    /// The client (monolithic uploads: one request per blob).
    pub client: Client,
    /// Its credentials.
    pub auth: RegistryAuth,
    /// Whether it speaks plain HTTP.
    pub http: bool,
    options: RegistryOptions,
}

/// The current-thread runtime a push or pull runs on.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("start the async runtime for", "the registry", e))
}

/// Maps an oci-client error on `reference` to ours.
pub(crate) fn err(reference: &impl std::fmt::Display) -> impl Fn(OciDistributionError) -> Error {
    let reference = reference.to_string();
    move |e| Error::Registry {
        reference: reference.clone(),
        reason: describe(&e),
    }
}

/// An oci-client error in one line (its sources joined).
fn describe(e: &OciDistributionError) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        src = c.source();
    }
    s
}

/// Whether a failed HTTPS request got as far as a TLS answer (a
/// certificate the client refused, an alert): such a registry speaks TLS,
/// and is never retried in plain HTTP.
fn speaks_tls(e: &OciDistributionError) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = src {
        let tls = c.downcast_ref::<rustls::Error>().or_else(|| {
            c.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(t) = tls {
            return !matches!(
                t,
                rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. }
            );
        }
        src = c.source();
    }
    // The verifier's refusal, when it reaches us only as text.
    describe(e).contains("certificate")
}

/// A client for the registry: TLS (or plain HTTP when `http`) with
/// `--ca-file`'s CAs besides the system's roots. A CA file that holds no
/// certificate, or one the TLS stack refuses, is an error naming the file
/// (oci-client's `Client::new` would fall back to its defaults, silently
/// dropping the CA and plain HTTP).
fn new_client(options: &RegistryOptions, http: bool, monolithic: bool) -> Result<Client, Error> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut certs = Vec::new();
    if let Some(ca) = &options.ca_file {
        let data = std::fs::read(ca).map_err(|e| Error::io("read", ca, e))?;
        let bad = |reason: String| Error::InputPath {
            path: ca.clone(),
            reason,
        };
        let found = CertificateDer::pem_slice_iter(&data)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(format!("not a PEM file of CA certificates: {e}")))?;
        if found.is_empty() {
            return Err(bad("holds no PEM certificate".to_owned()));
        }
        certs.push(Certificate {
            encoding: CertificateEncoding::Pem,
            data,
        });
    }
    let config = ClientConfig {
        protocol: if http {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        extra_root_certificates: certs,
        use_monolithic_push: monolithic,
        platform_resolver: None,
        user_agent: concat!("vibesys/", env!("CARGO_PKG_VERSION")),
        connect_timeout: Some(std::time::Duration::from_secs(30)),
        ..ClientConfig::default()
    };
    Client::try_from(config).map_err(|e| match &options.ca_file {
        Some(ca) => Error::InputPath {
            path: ca.clone(),
            reason: format!(
                "the TLS client refuses these CA certificates: {}",
                describe(&e)
            ),
        },
        None => Error::Registry {
            reference: "(no registry yet)".to_owned(),
            reason: format!("cannot set up the HTTP client: {}", describe(&e)),
        },
    })
}

impl Conn {
    /// Connects to `r`'s registry and authenticates for `op` on its
    /// repository. HTTPS first; a loopback registry (or any, with
    /// `insecure_http`) that does not answer in TLS is spoken to in
    /// plain HTTP, as Docker does for loopback registries.
    pub(crate) async fn open(
        r: &ImageRef,
        options: &RegistryOptions,
        op: RegistryOperation,
    ) -> Result<Self, Error> {
        // rustls without a default provider: ring is ours (no C toolchain
        // beyond cc, no OpenSSL). Installing it twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let auth = auth::credentials(r.registry_name())?;
        let plain_allowed = options.insecure_http || r.is_loopback();
        let client = new_client(options, false, true)?;
        let https_error = match client.auth(r.oci(), &auth, op).await {
            Ok(_) => {
                return Ok(Self {
                    client,
                    auth,
                    http: false,
                    options: options.clone(),
                });
            }
            Err(e @ OciDistributionError::RequestError(_)) if plain_allowed && !speaks_tls(&e) => {
                tracing::debug!("{}: no TLS ({e}); trying plain HTTP", r.registry());
                describe(&e)
            }
            Err(e) if matches!(e, OciDistributionError::RequestError(_)) => {
                let hint = if speaks_tls(&e) {
                    "give --ca-file with the CA that signed the registry's certificate"
                } else {
                    "plain HTTP is used only for loopback registries or with --insecure-http"
                };
                return Err(Error::Registry {
                    reference: r.to_string(),
                    reason: format!("{} ({hint})", describe(&e)),
                });
            }
            Err(e) => return Err(err(r)(e)),
        };
        let client = new_client(options, true, true)?;
        // Neither: the HTTPS error is the one that says why (an unknown
        // CA, a refused connection).
        client
            .auth(r.oci(), &auth, op)
            .await
            .map_err(|e| Error::Registry {
                reference: r.to_string(),
                reason: format!("HTTPS: {https_error}; plain HTTP: {}", describe(&e)),
            })?;
        Ok(Self {
            client,
            auth,
            http: true,
            options: options.clone(),
        })
    }

    /// A client for chunked uploads to the same registry, for a registry
    /// that refuses a monolithic one.
    pub(crate) async fn chunked(&self, r: &ImageRef) -> Result<Client, Error> {
        let client = new_client(&self.options, self.http, false)?;
        client
            .auth(r.oci(), &self.auth, RegistryOperation::Push)
            .await
            .map_err(err(r))?;
        Ok(client)
    }
}
