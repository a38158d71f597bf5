//! The files in `deploy/` checked as far as this machine allows: the
//! compose file and Kubernetes manifests parse and wire the right ports,
//! flags, probes, volumes, tokens and CPU counts; the image recipe builds in
//! stages and runs unprivileged with a gRPC health check; the systemd units
//! pass `systemd-analyze verify`; the quick start and the Slurm script run
//! for real on loopback and count exactly.

use nqueens_testkit::{self as kit, nqueens, operator, watchdog};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use yaml_rust2::{Yaml, YamlLoader};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(deploy(path)).unwrap_or_else(|e| panic!("deploy/{path}: {e}"))
}

/// YAML as JSON values, which index more kindly.
fn to_json(y: &Yaml) -> Value {
    match y {
        Yaml::Real(s) => s.parse::<f64>().map_or(Value::Null, |f| json!(f)),
        Yaml::Integer(i) => json!(i),
        Yaml::String(s) => json!(s),
        Yaml::Boolean(b) => json!(b),
        Yaml::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        Yaml::Hash(h) => Value::Object(
            h.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Yaml::String(s) => s.clone(),
                        other => to_json(other).to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        _ => Value::Null,
    }
}

/// Every document of a YAML file.
fn yaml(path: &str) -> Vec<Value> {
    YamlLoader::load_from_str(&read(path))
        .unwrap_or_else(|e| panic!("deploy/{path} is not YAML: {e}"))
        .iter()
        .map(to_json)
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().map_or_else(|| s.to_string(), str::to_string))
        .collect()
}

/// The value after `flag` in an argument list.
fn arg<'a>(args: &'a [String], flag: &str) -> &'a str {
    let i = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("{flag} missing from {args:?}"));
    &args[i + 1]
}

/// Every `--flag` in `args` (the subcommand first) is one the binary has.
fn flags_exist(args: &[String]) {
    let sub = &args[0];
    let help = nqueens(&[sub, "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for a in args.iter().filter(|a| a.starts_with("--")) {
        let flag = a.split('=').next().unwrap();
        assert!(help.contains(flag), "`nqueens {sub}` has no {flag}");
    }
}

fn port_of(addr: &str) -> u64 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

#[test]
fn the_compose_file_keeps_data_in_a_volume_tokens_in_secrets_and_workers_scalable() {
    let doc = &yaml("compose.yaml")[0];
    let services = &doc["services"];
    let coord = &services["coordinator"];
    let worker = &services["worker"];
    let cargs = strings(&coord["command"]);
    let wargs = strings(&worker["command"]);
    flags_exist(&cargs);
    flags_exist(&wargs);
    assert_eq!(cargs[0], "coordinator");
    assert_eq!(wargs[0], "worker");

    // The data directory is a named volume.
    let data = arg(&cargs, "--data-dir");
    let mounts = strings(&coord["volumes"]);
    let volume = mounts
        .iter()
        .find_map(|m| m.strip_suffix(&format!(":{data}")))
        .unwrap_or_else(|| panic!("no volume at {data}: {mounts:?}"));
    assert!(
        doc["volumes"].get(volume).is_some(),
        "volume {volume} not declared"
    );

    // Tokens are secrets, mounted where the commands read them.
    for (args, flag, secret) in [
        (&cargs, "--worker-token-file", "worker_token"),
        (&cargs, "--operator-token-file", "operator_token"),
        (&wargs, "--token-file", "worker_token"),
    ] {
        assert_eq!(arg(args, flag), format!("/run/secrets/{secret}"));
        assert!(
            doc["secrets"][secret]["file"].is_string(),
            "secret {secret}"
        );
    }
    assert!(strings(&worker["secrets"]).contains(&"worker_token".to_string()));

    // Workers scale: no fixed name, no published port; CPUs = threads;
    // they find the coordinator by its service name and port.
    assert!(worker.get("container_name").is_none() && worker.get("ports").is_none());
    assert_eq!(
        worker["cpus"].as_f64().unwrap(),
        arg(&wargs, "--threads").parse::<f64>().unwrap()
    );
    let listen = port_of(arg(&cargs, "--listen"));
    assert_eq!(
        worker["environment"]["NQUEENS_COORDINATOR"],
        format!("http://coordinator:{listen}")
    );
    assert!(strings(&coord["ports"])
        .iter()
        .any(|p| p.ends_with(&format!(":{listen}"))));
    assert_eq!(
        worker["depends_on"]["coordinator"]["condition"],
        "service_healthy"
    );
}

// Over 80 lines: one scenario whose steps each build on the state the
// last one left; split, they would only pass that state along.
#[test]
fn the_kubernetes_manifests_wire_ports_probes_tokens_storage_and_cpus() {
    let mut docs = yaml("k8s/coordinator.yaml");
    docs.extend(yaml("k8s/worker.yaml"));
    docs.extend(yaml("k8s/secret.yaml"));
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"] == k)
            .unwrap_or_else(|| panic!("no {k}"))
            .clone()
    };
    let (service, sts, deployment, secret) = (
        kind("Service"),
        kind("StatefulSet"),
        kind("Deployment"),
        kind("Secret"),
    );
    let secret_name = secret["metadata"]["name"].as_str().unwrap();

    // The coordinator: one replica, data on a claim, gRPC probes on its port.
    assert_eq!(sts["spec"]["replicas"], 1);
    let pod = &sts["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let cargs = strings(&c["args"]);
    flags_exist(&cargs);
    let listen = port_of(arg(&cargs, "--listen"));
    let grpc = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "grpc")
        .expect("a port named grpc");
    assert_eq!(grpc["containerPort"], listen);
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["grpc"]["port"], listen, "{probe}");
    }
    let claim = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"].clone();
    let mount = |c: &Value, name: &Value| {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == *name)
            .unwrap_or_else(|| panic!("no mount of {name}"))["mountPath"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(mount(c, &claim), arg(&cargs, "--data-dir"));
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);

    // The Service reaches that port by name.
    let sport = &service["spec"]["ports"][0];
    assert_eq!(
        (sport["name"].as_str(), sport["targetPort"].as_str()),
        (Some("grpc"), Some("grpc"))
    );
    assert_eq!(
        service["spec"]["selector"],
        sts["spec"]["template"]["metadata"]["labels"]
    );

    // Tokens come from the Secret, where the arguments read them.
    let tokens = |pod: &Value| {
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["secret"]["secretName"] == secret_name)
            .expect("a volume of the Secret")["name"]
            .clone()
    };
    let dir = mount(c, &tokens(pod));
    for flag in ["--worker-token-file", "--operator-token-file"] {
        let file = arg(&cargs, flag)
            .strip_prefix(&format!("{dir}/"))
            .unwrap()
            .to_string();
        assert!(
            secret["stringData"].get(&file).is_some(),
            "{file} not in the Secret"
        );
    }

    // Workers: a Deployment, CPUs requested = threads, the Service's address.
    let wpod = &deployment["spec"]["template"]["spec"];
    let w = &wpod["containers"][0];
    let wargs = strings(&w["args"]);
    flags_exist(&wargs);
    let threads = arg(&wargs, "--threads");
    assert_eq!(w["resources"]["requests"]["cpu"], threads);
    let env = w["env"].as_array().unwrap();
    let url = env
        .iter()
        .find(|e| e["name"] == "NQUEENS_COORDINATOR")
        .unwrap()["value"]
        .clone();
    assert_eq!(
        url,
        format!(
            "http://{}:{}",
            service["metadata"]["name"].as_str().unwrap(),
            sport["port"]
        )
    );
    let wdir = mount(w, &tokens(wpod));
    assert!(arg(&wargs, "--token-file").starts_with(&format!("{wdir}/")));
    // The drain must fit in the pod's grace period.
    let grace: u64 = arg(&wargs, "--grace").parse().unwrap();
    assert!(wpod["terminationGracePeriodSeconds"].as_u64().unwrap() > grace);
}

/// GPU workers, in compose (a profile, an NVIDIA device reservation) and
/// Kubernetes (`nvidia.com/gpu`): real `worker` flags, `--gpus` given,
/// one GPU asked for, CPUs for the threads and the card's two feeders;
/// the image has the Vulkan loader and asks the container toolkit for
/// the driver's Vulkan files.
#[test]
fn gpu_workers_ask_for_a_card_and_the_image_can_reach_it() {
    let feeders = 2;
    let compose = &yaml("compose.yaml")[0]["services"]["gpu-worker"];
    let cargs = strings(&compose["command"]);
    flags_exist(&cargs);
    assert_eq!(
        (cargs[0].as_str(), arg(&cargs, "--gpus")),
        ("worker", "auto")
    );
    assert_eq!(strings(&compose["profiles"]), ["gpu"]);
    let device = &compose["deploy"]["resources"]["reservations"]["devices"][0];
    assert_eq!(device["driver"], "nvidia");
    assert_eq!(device["count"], 1);
    assert!(strings(&device["capabilities"]).contains(&"gpu".to_string()));
    let threads: f64 = arg(&cargs, "--threads").parse().unwrap();
    assert_eq!(
        compose["cpus"].as_f64().unwrap(),
        threads + f64::from(feeders)
    );

    let k8s = &yaml("k8s/worker-gpu.yaml")[0];
    assert_eq!(k8s["kind"], "Deployment");
    let c = &k8s["spec"]["template"]["spec"]["containers"][0];
    let kargs = strings(&c["args"]);
    flags_exist(&kargs);
    assert_eq!(arg(&kargs, "--gpus"), "auto");
    for side in ["requests", "limits"] {
        assert_eq!(c["resources"][side]["nvidia.com/gpu"], 1, "{side}");
    }
    let threads: u32 = arg(&kargs, "--threads").parse().unwrap();
    assert_eq!(
        c["resources"]["requests"]["cpu"],
        (threads + feeders).to_string()
    );

    let image = read("Dockerfile");
    assert!(image.contains("libvulkan1"), "the Vulkan loader");
    let caps = image
        .lines()
        .find_map(|l| l.trim().strip_prefix("ENV NVIDIA_DRIVER_CAPABILITIES="))
        .expect("NVIDIA_DRIVER_CAPABILITIES");
    assert!(caps.split(',').any(|c| c == "graphics"), "{caps}");
}

#[test]
fn the_image_builds_in_stages_runs_unprivileged_and_checks_grpc_health() {
    let file = read("Dockerfile");
    let lines: Vec<&str> = file.lines().map(str::trim).collect();
    assert!(
        lines.iter().filter(|l| l.starts_with("FROM ")).count() >= 2,
        "multi-stage"
    );
    assert!(lines.iter().any(|l| l.starts_with("COPY --from=build")));
    let user = lines
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER");
    assert!(
        !user.starts_with('0') && !user.starts_with("root"),
        "USER {user}"
    );
    assert!(lines
        .iter()
        .any(|l| l.starts_with("EXPOSE ") && l.contains("7700")));
    let check = file
        .split("HEALTHCHECK")
        .nth(1)
        .expect("a HEALTHCHECK")
        .split('\n')
        .take(2)
        .collect::<String>();
    assert!(check.contains(r#"CMD ["nqueens", "health"]"#), "{check}");
    // Nothing the build needs is ignored, nothing big is sent.
    let ignore =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".dockerignore"))
            .unwrap();
    assert!(ignore.lines().any(|l| l.trim() == "target/"));
}

#[test]
fn health_answers_for_a_running_coordinator_and_exits_3_without_one() {
    let _watchdog = watchdog("health_answers_for_a_running_coordinator_and_exits_3_without_one");
    let dir = kit::tempdir();
    let c = kit::start(&dir.path().join("data"));
    let (code, lines, err) = operator(&c.url, &["health"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines[0]["serving"], true);
    let (code, _, err) = operator(&format!("http://{}", kit::free_addr()), &["health"]);
    assert_eq!(code, 3, "{err}");
}

#[test]
fn the_systemd_units_verify_and_restart() {
    let dir = kit::tempdir();
    let bin = kit::binary().to_str().expect("a UTF-8 path");
    let env_file = dir.path().join("worker.env");
    std::fs::write(&env_file, "NQUEENS_COORDINATOR=http://127.0.0.1:7700\n").unwrap();
    let mut units = Vec::new();
    for name in ["nqueens-coordinator.service", "nqueens-worker.service"] {
        let text = read(&format!("systemd/{name}"));
        assert!(text.contains("\nRestart=always\n"), "{name}");
        // The flags on ExecStart (continued lines joined) exist.
        let exec = text
            .split("ExecStart=")
            .nth(1)
            .unwrap()
            .split("\n")
            .scan(true, |more, l| {
                let take = *more;
                *more = l.trim_end().ends_with('\\');
                take.then(|| l.trim_end_matches('\\').to_string())
            })
            .collect::<Vec<_>>()
            .join(" ");
        let args: Vec<String> = exec
            .split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect();
        flags_exist(&args);
        // Verify a copy that points at this build's binary.
        let local = text
            .replace("/usr/local/bin/nqueens", bin)
            .replace("/etc/nqueens/worker.env", env_file.to_str().unwrap());
        let path = dir.path().join(name);
        std::fs::write(&path, local).unwrap();
        units.push(path);
    }
    let Ok(out) = Command::new("systemd-analyze")
        .arg("verify")
        .args(&units)
        .output()
    else {
        eprintln!("systemd-analyze is not on this machine: units checked by reading only");
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.trim().is_empty(),
        "systemd-analyze verify:\n{err}"
    );
}

#[test]
fn the_quick_start_counts_on_loopback() {
    let _watchdog = watchdog("the_quick_start_counts_on_loopback");
    let out = Command::new("bash")
        .arg(deploy("quickstart.sh"))
        .arg("13")
        .env("NQUEENS", kit::binary())
        .env("RUST_LOG", "warn")
        .env_remove("NQUEENS_COORDINATOR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "quickstart.sh failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("total 73,712, unique 9,233"), "{stdout}");
    assert!(stdout.contains("verdict  passed"), "{stdout}");
    assert_eq!(
        stdout.matches("quick-").count(),
        3,
        "three workers listed:\n{stdout}"
    );
}

#[test]
fn the_slurm_script_runs_a_worker_with_the_cpus_slurm_gives() {
    let _watchdog = watchdog("the_slurm_script_runs_a_worker_with_the_cpus_slurm_gives");
    let script = read("slurm/nqueens-workers.sbatch");
    let lead: u64 = script
        .lines()
        .find_map(|l| l.strip_prefix("#SBATCH --signal=TERM@"))
        .expect("#SBATCH --signal=TERM@S")
        .parse()
        .unwrap();
    let dir = kit::tempdir();
    let token = dir.path().join("worker.token");
    std::fs::write(&token, "slurm-test-token\n").unwrap();
    let c = kit::start_with(
        &dir.path().join("data"),
        &["--worker-token-file", token.to_str().unwrap()],
    );
    // srun stand-in: drops its own options and runs the step here.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(
        bin.join("srun"),
        "#!/bin/sh\nwhile [ \"${1#--}\" != \"$1\" ]; do shift; done\nexec \"$@\"\n",
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(bin.join("srun"))
        .status()
        .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let log = dir.path().join("slurm.log");
    let child = Command::new("bash")
        .arg(deploy("slurm/nqueens-workers.sbatch"))
        .env("PATH", path)
        .env("SLURM_CPUS_PER_TASK", "1")
        .env("NQUEENS_BIN", kit::binary())
        .env("NQUEENS_COORDINATOR", &c.url)
        .env("NQUEENS_WORKER_TOKEN_FILE", &token)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut worker = kit::Worker(child);
    let (code, lines, err) = operator(&c.url, &["submit", "12", "--watch", "--interval", "0.2"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines.last().unwrap()["total"], "14200");
    let (_, workers, _) = operator(&c.url, &["workers"]);
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0]["cores"], 1, "threads from SLURM_CPUS_PER_TASK");
    // Slurm's SIGTERM before the time limit: the worker drains and exits 0,
    // within the grace, which fits in the signal's lead.
    kit::terminate(&worker);
    assert!(worker.wait().unwrap().success());
    let grace: u64 = script
        .rsplit("--grace ")
        .next()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        grace < lead,
        "--grace {grace} must end before Slurm's SIGKILL ({lead} s lead)"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("(1 thread, core "), "{text}");
}
