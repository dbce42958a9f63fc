//! Credentials as the container ecosystem keeps them: Docker's
//! `config.json` (`$DOCKER_CONFIG` or `~/.docker`: `auths`, `credsStore`,
//! `credHelpers`), then the containers `auth.json` that `podman login` and
//! `skopeo login` write (`$REGISTRY_AUTH_FILE`, `$XDG_RUNTIME_DIR/containers`).
//! The registry's challenge decides how they are used (basic, or a bearer
//! token fetched with them): that is oci-client's part.

use docker_credential::{CredentialRetrievalError, DockerCredential};
use oci_client::secrets::RegistryAuth;

use crate::error::Error;

/// The key Docker stores Docker Hub's credentials under.
const DOCKER_HUB_KEY: &str = "https://index.docker.io/v1/";

/// The credentials for `registry` (`host[:port]` as written in the
/// reference), or anonymous when none are configured.
pub(crate) fn credentials(registry: &str) -> Result<RegistryAuth, Error> {
    let key = match registry {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB_KEY,
        r => r,
    };
    // Docker keys `auths` by host, some tools by URL.
    let keys = [
        key.to_owned(),
        format!("https://{key}"),
        format!("http://{key}"),
    ];
    let missing = |r: &Result<DockerCredential, CredentialRetrievalError>| {
        matches!(
            r,
            Err(CredentialRetrievalError::NoCredentialConfigured
                | CredentialRetrievalError::ConfigNotFound
                | CredentialRetrievalError::ConfigReadError)
        )
    };
    let mut found = Err(CredentialRetrievalError::NoCredentialConfigured);
    for k in &keys {
        found = docker_credential::get_credential(k);
        if !missing(&found) {
            break;
        }
    }
    if missing(&found) {
        for k in &keys {
            found = docker_credential::get_podman_credential(k);
            if !missing(&found) {
                break;
            }
        }
    }
    match found {
        Ok(DockerCredential::UsernamePassword(u, p)) => Ok(RegistryAuth::Basic(u, p)),
        // An identity token is sent the way `docker login` stores it for
        // registries that hand one out (ACR, Harbor): user `<token>`.
        Ok(DockerCredential::IdentityToken(t)) => Ok(RegistryAuth::Basic("<token>".to_owned(), t)),
        Err(
            CredentialRetrievalError::NoCredentialConfigured
            | CredentialRetrievalError::ConfigNotFound
            | CredentialRetrievalError::ConfigReadError,
        ) => Ok(RegistryAuth::Anonymous),
        // A helper's output may hold secrets: name the helper only.
        Err(CredentialRetrievalError::HelperFailure { helper, .. }) => Err(Error::Registry {
            reference: registry.to_owned(),
            reason: format!("the credential helper docker-credential-{helper} failed"),
        }),
        Err(e) => Err(Error::Registry {
            reference: registry.to_owned(),
            reason: format!("cannot read its credentials: {e}"),
        }),
    }
}
