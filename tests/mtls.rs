//! Mutual TLS end to end: a coordinator that requires client certificates,
//! a worker and the operator's commands presenting theirs
//! (`--tls-cert/--tls-key`), and the same commands refused without one.

use nqueens_testkit::{self as kit, nqueens};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// A CA and leaf certificates signed by it, written as PEM files in `dir`.
fn certificates(dir: &Path) -> impl Fn(&str) -> (PathBuf, PathBuf) + '_ {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    std::fs::write(dir.join("ca.pem"), ca.self_signed(&ca_key).unwrap().pem()).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    move |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let (c, k) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

// Over 80 lines: one scenario whose steps each build on the state the
// last one left; split, they would only pass that state along.
#[test]
fn a_worker_and_the_cli_work_over_mutual_tls() {
    let _watchdog = kit::watchdog("a_worker_and_the_cli_work_over_mutual_tls");
    let dir = kit::tempdir();
    let leaf = certificates(dir.path());
    let (server_cert, server_key) = leaf("localhost");
    let (worker_cert, worker_key) = leaf("worker-1");
    let (op_cert, op_key) = leaf("operator");
    let ca = dir.path().join("ca.pem");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let c = kit::start_with(
        &dir.path().join("data"),
        &[
            "--tls-cert",
            &s(&server_cert),
            "--tls-key",
            &s(&server_key),
            "--tls-client-ca",
            &s(&ca),
        ],
    );
    let url = c.url.replace("http://127.0.0.1", "https://localhost");
    let tls = |cert: &Path, key: &Path| {
        vec![
            "--coordinator".to_string(),
            url.clone(),
            "--tls-ca".into(),
            s(&ca),
            "--tls-cert".into(),
            s(cert),
            "--tls-key".into(),
            s(key),
        ]
    };
    let op = |args: &[&str], cert: Option<(&Path, &Path)>| {
        let mut cmd = nqueens(args);
        match cert {
            Some((c, k)) => cmd.args(tls(c, k)),
            None => cmd.args(["--coordinator", &url, "--tls-ca", &s(&ca)]),
        };
        let out = cmd.arg("--json").output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let me = Some((op_cert.as_path(), op_key.as_path()));

    // Without a client certificate the handshake fails.
    let (code, _, err) = op(&["jobs"], None);
    assert_ne!(code, 0, "accepted without a client certificate: {err}");
    // A client certificate on a plain http:// address is a mistake said so.
    let out = nqueens(&["jobs", "--coordinator", &c.url])
        .args(["--tls-cert", &s(&op_cert), "--tls-key", &s(&op_key)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is not https://"), "{err}");

    let (code, out, err) = op(&["submit", "10", "--strategy", "frame", "--tasks", "8"], me);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"job\":\"1\""), "{out}");
    let mut worker = kit::Worker(
        nqueens(&["worker", "--name", "mtls-worker", "--threads", "1"])
            .args(tls(&worker_cert, &worker_key))
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let (code, out, err) = op(&["watch", "1", "--interval", "0.1"], me);
    assert_eq!(code, 0, "{err}");
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(
        (last["state"].as_str(), last["total"].as_str()),
        (Some("done"), Some("724"))
    );
    let (code, out, err) = op(&["workers"], me);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("mtls-worker"), "{out}");
    let (code, _, err) = op(&["health"], me);
    assert_eq!(code, 0, "{err}");
    kit::terminate(&worker);
    assert!(worker.0.wait().unwrap().success());
}
