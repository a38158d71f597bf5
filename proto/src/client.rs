//! Connecting to a coordinator, as a worker or an operator: one channel
//! (plain or TLS) and the bearer token added to every call.

use crate::refusal::Refusal;
use std::path::{Path, PathBuf};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

/// A channel whose every call carries the token.
pub type Authed = InterceptedService<Channel, Auth>;

/// Why a connection could not even be set up (nothing was sent yet).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("bad coordinator address '{0}': {1} (expected http://host:port or https://host:port)")]
    Address(String, String),
    #[error("the token cannot be sent in a header (is it text on one line?): {0}")]
    Token(String),
    #[error("cannot read the CA certificate {path}: {source}")]
    CaFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("TLS setup for {0} failed: {1}")]
    Tls(String, String),
    #[error("cannot read the client certificate or key {path}: {source}")]
    IdentityFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("a client certificate was given but {0} is not https://: give the coordinator's https:// address")]
    IdentityWithoutTls(String),
}

/// Adds `authorization: Bearer <token>` to every call (nothing without a token).
#[derive(Clone)]
pub struct Auth(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// How long a connection may stay silent before a ping asks whether the
/// other end is there, and how long the answer may take: a half-open
/// connection (no FIN, no RST: a dead host, a NAT that forgot it) fails
/// its calls within twice this, 40 s by default, less than a lease's
/// default lifetime (60 s), so a worker behind one reconnects before its
/// leases expire. `NQUEENS_KEEPALIVE` (seconds, at least 1) changes it
/// for links that need quicker detection (tests use a few seconds).
pub fn keepalive() -> std::time::Duration {
    let secs = std::env::var("NQUEENS_KEEPALIVE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&s| s > 0)
        .unwrap_or(20);
    std::time::Duration::from_secs(secs)
}

/// A lazily connected channel to `url`: the first call connects, and a
/// lost connection is re-established by the next call. `https://` uses
/// `ca` (PEM) as the only trusted root when given, else the public roots.
pub fn connect(url: &str, token: Option<&str>, ca: Option<&Path>) -> Result<Authed, ClientError> {
    connect_tls(url, token, ca, None)
}

/// [`connect`], presenting the client certificate `identity` (certificate
/// chain and private key, PEM) to a coordinator that requires one (mTLS).
pub fn connect_tls(
    url: &str,
    token: Option<&str>,
    ca: Option<&Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<Authed, ClientError> {
    let scheme = match url.split_once("://") {
        Some(("http" | "https", _)) => None,
        Some((other, _)) => Some(format!("{other}:// is not a scheme a coordinator speaks")),
        None => Some("no scheme".to_string()),
    };
    if let Some(why) = scheme {
        return Err(ClientError::Address(url.to_string(), why));
    }
    let mut endpoint = endpoint(url)?;
    if identity.is_some() && !url.starts_with("https://") {
        return Err(ClientError::IdentityWithoutTls(url.to_string()));
    }
    if url.starts_with("https://") {
        let tls = match ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|source| ClientError::CaFile {
                    path: path.to_path_buf(),
                    source,
                })?;
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))
            }
            None => ClientTlsConfig::new().with_webpki_roots(),
        };
        let tls = match identity {
            Some((cert, key)) => {
                let read = |path: &Path| {
                    std::fs::read(path).map_err(|source| ClientError::IdentityFile {
                        path: path.to_path_buf(),
                        source,
                    })
                };
                tls.identity(Identity::from_pem(read(cert)?, read(key)?))
            }
            None => tls,
        };
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| ClientError::Tls(url.to_string(), e.to_string()))?;
    }
    let token = token
        .map(|t| format!("Bearer {t}").parse())
        .transpose()
        .map_err(|e: tonic::metadata::errors::InvalidMetadataValue| {
            ClientError::Token(e.to_string())
        })?;
    Ok(InterceptedService::new(
        endpoint.connect_lazy(),
        Auth(token),
    ))
}

/// The endpoint every connection to a coordinator is made from: its
/// connect timeout and keep-alive pings (TLS and the token are added by
/// [`connect_tls`]; the simulation tests give it their own connector).
pub fn endpoint(url: &str) -> Result<Endpoint, ClientError> {
    Ok(Channel::from_shared(url.to_string())
        .map_err(|e| ClientError::Address(url.to_string(), e.to_string()))?
        // A host that drops packets fails the call instead of hanging it.
        .connect_timeout(std::time::Duration::from_secs(10))
        // A connection that went silent (a dead host, a NAT that forgot
        // it, a partition) is found by pings and fails its calls, which
        // are retried on a new one; a pause shorter than this survives.
        .http2_keep_alive_interval(keepalive())
        .keep_alive_timeout(keepalive())
        .keep_alive_while_idle(true))
}

/// The one-line reason a call failed, with what to do about it.
pub fn explain(url: &str, status: &Status) -> String {
    let about_the_token = matches!(
        status.code(),
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
    );
    match Refusal::of(status) {
        Refusal::Transport if about_the_token => format!(
            "something between here and the coordinator at {url} refused the call: {} (a \
             proxy or load balancer; the coordinator did not answer)",
            status.message()
        ),
        Refusal::Transport => format!(
            "cannot reach the coordinator at {url}: {} (is it running? check --coordinator or \
             NQUEENS_COORDINATOR{})",
            status.message(),
            implied_port(url)
                .map(|p| format!(
                    "; the address names no port, so port {p} was tried: a coordinator \
                     listens on 7700 unless its --listen says otherwise"
                ))
                .unwrap_or_default()
        ),
        Refusal::NotNow => format!(
            "the coordinator at {url} cannot answer that now: {} (try again shortly)",
            status.message()
        ),
        r if r.about_the_token() => format!(
            "the coordinator at {url} refused the token: {}",
            status.message()
        ),
        _ => status.message().to_string(),
    }
}

/// The port a coordinator's address without one stands for (80 for
/// http, 443 for https), if it names none.
fn implied_port(url: &str) -> Option<u16> {
    let uri: tonic::codegen::http::Uri = url.parse().ok()?;
    match (uri.port_u16(), uri.scheme_str()) {
        (None, Some("https")) => Some(443),
        (None, _) => Some(80),
        (Some(_), _) => None,
    }
}

/// The text of a failed call and of every error under it.
fn chain(status: &tonic::Status) -> String {
    let mut text = status.message().to_string();
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        let e_text = e.to_string();
        if !text.contains(&e_text) {
            text += &format!(": {e_text}");
        }
        source = e.source();
    }
    text
}

/// The coordinator's reason when it refused the connection for lack of
/// places (RESOURCE_EXHAUSTED, "too many connections ...").
fn overloaded(status: &Status) -> Option<String> {
    (Refusal::of(status) == Refusal::Full && status.message().starts_with("too many connections"))
        .then(|| status.message().to_string())
}

/// A call that failed because one side speaks TLS and the other does not
/// (or the certificate is not trusted): what it probably is and what to
/// change. The transport's own words ("received corrupt message of type
/// InvalidContentType", "transport error") do not say.
pub fn tls_mismatch(url: &str, status: &Status) -> Option<String> {
    if let Some(why) = overloaded(status) {
        return Some(format!(
            "the coordinator at {url} refused the connection: {why}; it serves again as \
             connections close (or raise its NQUEENS_MAX_CONNECTIONS)"
        ));
    }
    let text = chain(status);
    let lower = text.to_lowercase();
    if lower.contains("dns error") || lower.contains("failed to lookup address") {
        return Some(format!(
            "the host in {url} cannot be found: check its name (and this machine's DNS) \
             ({text})"
        ));
    }
    let plain = url
        .strip_prefix("https://")
        .map(|rest| format!("http://{rest}"));
    if let Some(plain) = plain {
        if text.contains("InvalidContentType") || text.contains("corrupt message") {
            return Some(format!(
                "the coordinator at {url} answers without TLS (a plain-text coordinator, \
                 started without --tls-cert): use {plain}, or give the coordinator a certificate \
                 ({text})"
            ));
        }
        if text.contains("invalid peer certificate") || text.contains("UnknownIssuer") {
            return Some(format!(
                "the coordinator at {url} speaks TLS but its certificate is not trusted here: \
                 give the CA that signed it with --tls-ca F (and check that the URL's host is \
                 one the certificate names) ({text})"
            ));
        }
        return None;
    }
    // Over http://, a TLS server reads the HTTP/2 preface as a broken TLS
    // record and closes the connection before any answer.
    let tls = url
        .strip_prefix("http://")
        .map(|rest| format!("https://{rest}"))?;
    let closed = [
        "transport error",
        "connection closed",
        "connection reset",
        "broken pipe",
        "frame with invalid size",
    ];
    (status.code() != tonic::Code::Unavailable || !lower.contains("tcp connect"))
        .then_some(())
        .filter(|()| closed.iter().any(|c| lower.contains(c)))
        .map(|()| {
            format!(
                "the coordinator at {url} closed the connection before answering: it probably \
                 speaks TLS (started with --tls-cert); use {tls} (with --tls-ca F if its \
                 certificate has its own CA). If it does not, it was shutting down or had no \
                 place for this connection (try again), or the port is not a coordinator's \
                 (its metrics port?) ({text})"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address without a port: the failure says which port was tried,
    /// and the coordinator's.
    #[test]
    fn an_address_without_a_port_names_the_port_tried() {
        let down = Status::from_error(Box::new(std::io::Error::other("tcp connect error")));
        let said = explain("http://127.0.0.1", &down);
        assert!(
            said.contains("port 80 was tried") && said.contains("7700"),
            "{said}"
        );
        assert!(explain("https://coord", &down).contains("port 443"));
        assert!(!explain("http://127.0.0.1:7700", &down).contains("was tried"));
    }

    /// A proxy's 401 is said to be the proxy's; the coordinator's own
    /// refusal of the token is said to be the coordinator's.
    #[test]
    fn a_refusal_names_who_refused() {
        let url = "http://coord:7700";
        let proxy = Status::unauthenticated("HTTP status client error (401 Unauthorized)");
        let said = explain(url, &proxy);
        assert!(
            said.starts_with("something between here and the coordinator"),
            "{said}"
        );
        assert!(said.contains("401 Unauthorized"), "{said}");
        let coordinator = Refusal::Unauthenticated.status("the worker token is wrong");
        assert_eq!(
            explain(url, &coordinator),
            "the coordinator at http://coord:7700 refused the token: the worker token is wrong"
        );
    }
}
