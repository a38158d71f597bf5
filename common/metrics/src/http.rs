//! `GET /metrics` over HTTP/1: the page is rendered on each scrape.

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use std::net::SocketAddr;

/// The content type of the Prometheus text format (version 0.0.4), which
/// [`crate::render`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Binds a metrics listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Whether serving metrics on `addr` exposes them beyond this machine. The
/// page has no authentication, so every process refuses such an address
/// unless its operator says a firewall or network policy guards it
/// (`--metrics-public`).
pub fn beyond_loopback(addr: SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

/// Serves `/metrics` on `listener` until the task is dropped. `render`
/// gives the page, or why there is none yet (answered 503, e.g. while a
/// coordinator recovers its state).
pub async fn serve<F>(listener: tokio::net::TcpListener, render: F)
where
    F: Fn() -> Result<String, String> + Clone + Send + Sync + 'static,
{
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let render = render.clone();
                async move {
                    let response = match req.uri().path() {
                        "/metrics" => match render() {
                            Ok(page) => Response::builder()
                                .header("content-type", CONTENT_TYPE)
                                .body(Full::new(Bytes::from(page))),
                            Err(why) => Response::builder()
                                .status(StatusCode::SERVICE_UNAVAILABLE)
                                .body(Full::new(Bytes::from(why + "\n"))),
                        },
                        _ => Response::builder()
                            .status(StatusCode::NOT_FOUND)
                            .body(Full::new(Bytes::from("try /metrics\n"))),
                    };
                    response.map_err(|e| std::io::Error::other(e.to_string()))
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_the_page_503_before_it_exists_and_404_elsewhere() {
        let l = super::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let r = ready.clone();
        let served = tokio::spawn(super::serve(l, move || {
            match r.load(std::sync::atomic::Ordering::Relaxed) {
                true => Ok("up 1\n".to_string()),
                false => Err("starting".to_string()),
            }
        }));
        assert!(get(addr, "/metrics").await.starts_with("HTTP/1.1 503"));
        ready.store(true, std::sync::atomic::Ordering::Relaxed);
        let ok = get(addr, "/metrics").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.contains(super::CONTENT_TYPE) && ok.ends_with("up 1\n"),
            "{ok}"
        );
        assert!(get(addr, "/other").await.starts_with("HTTP/1.1 404"));
        served.abort();
    }
}
