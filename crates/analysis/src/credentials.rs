//! The credentials of a [`Source`], read from the Secrets its spec names
//! (`bearerTokenSecret`, `caSecret`) at the start of each round, so that a rotated token or
//! CA is used at the next round. One that cannot be read makes the round inconclusive, with
//! the reason (not found, forbidden, no such key) in the status.
//!
//! # Invariants
//!
//! - Only the Secrets of the analysed object's namespace are read (the caller's `Api`), one
//!   `get` each, never a list or a watch.
//! - A token is trimmed of the newline `echo` leaves, and an empty one is refused: it would
//!   be sent as `Bearer ` and refused by the server with a less useful message.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::plan::Source;
use crate::provider::Endpoint;
use crate::spec::SecretKeyRef;

/// Why a Secret of a [`Source`] cannot be used; the message names the spec's field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// No Secret of that name in the namespace.
    #[error("{field}: Secret {name} not found")]
    NotFound {
        /// The spec's field (`bearerTokenSecret`, `caSecret`).
        field: &'static str,
        /// The Secret's name.
        name: String,
    },
    /// The controller's ServiceAccount may not read it.
    #[error(
        "{field}: the controller may not read Secret {name} (grant its ServiceAccount get on it, docs/analysis.md \"Credentials\")"
    )]
    Forbidden {
        /// The spec's field.
        field: &'static str,
        /// The Secret's name.
        name: String,
    },
    /// The read failed otherwise (the API server unreachable, say).
    #[error("{field}: Secret {name}: {why}")]
    Unreadable {
        /// The spec's field.
        field: &'static str,
        /// The Secret's name.
        name: String,
        /// The error's chain of messages.
        why: String,
    },
    /// The Secret has no such key.
    #[error("{field}: Secret {name} has no key {key}")]
    NoKey {
        /// The spec's field.
        field: &'static str,
        /// The Secret's name.
        name: String,
        /// The key asked for.
        key: String,
    },
    /// The token is not UTF-8 text.
    #[error("bearerTokenSecret {name}/{key}: not UTF-8")]
    TokenNotText {
        /// The Secret's name.
        name: String,
        /// The key.
        key: String,
    },
    /// The token is empty (or only white space).
    #[error("bearerTokenSecret {name}/{key}: empty")]
    EmptyToken {
        /// The Secret's name.
        name: String,
        /// The key.
        key: String,
    },
}

impl Source {
    /// Where this round's queries go: the address with the token and CA its Secrets hold now,
    /// or why a Secret cannot be used (every measurement of the round is then inconclusive).
    pub async fn endpoint(&self, secrets: &Api<Secret>) -> Result<Endpoint, CredentialError> {
        let bearer_token = match &self.bearer_token_secret {
            Some(key) => {
                let bytes = read_secret(secrets, key, "bearerTokenSecret").await?;
                let text = |_| CredentialError::TokenNotText {
                    name: key.name.clone(),
                    key: key.key.clone(),
                };
                // `echo token > file` leaves a newline that no server accepts in a header.
                let token = String::from_utf8(bytes).map_err(text)?.trim().to_owned();
                if token.is_empty() {
                    return Err(CredentialError::EmptyToken {
                        name: key.name.clone(),
                        key: key.key.clone(),
                    });
                }
                Some(token)
            }
            None => None,
        };
        let ca_pem = match &self.ca_secret {
            Some(key) => Some(read_secret(secrets, key, "caSecret").await?),
            None => None,
        };
        Ok(Endpoint {
            provider: self.provider,
            address: self.address.clone(),
            bearer_token,
            ca_pem,
        })
    }
}

/// The bytes under `key` of a Secret, or why not, naming the `field` of the spec.
async fn read_secret(
    secrets: &Api<Secret>,
    key: &SecretKeyRef,
    field: &'static str,
) -> Result<Vec<u8>, CredentialError> {
    let name = key.name.clone();
    let secret = match secrets.get(&key.name).await {
        Ok(secret) => secret,
        Err(kube::Error::Api(status)) if status.is_not_found() => {
            return Err(CredentialError::NotFound { field, name });
        }
        Err(kube::Error::Api(status)) if status.is_forbidden() => {
            return Err(CredentialError::Forbidden { field, name });
        }
        Err(error) => {
            let why = crate::provider::error_chain(&error);
            return Err(CredentialError::Unreadable { field, name, why });
        }
    };
    secret
        .data
        .and_then(|mut data| data.remove(&key.key))
        .map(|bytes| bytes.0)
        .ok_or_else(|| CredentialError::NoKey {
            field,
            name,
            key: key.key.clone(),
        })
}
