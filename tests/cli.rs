//! The `nqueens` binary, run as a user runs it.

use nqueens_testkit as kit;
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn nqueens(args: &[&str]) -> Output {
    run(args, None)
}

fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(kit::binary())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nqueens");
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

#[test]
fn solve_prints_counts_and_verifies_them() {
    let o = nqueens(&["solve", "12", "--threads", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("total    14200\n"), "{text}");
    assert!(text.contains("unique   1787\n"), "{text}");
    assert!(text.contains("matches OEIS"), "{text}");
    assert!(text.contains("nodes/s"), "{text}");
}

/// `solve --mode join` counts by the second algorithm (whole boards cut
/// into halves, or any plan's subproblems with --strategy), names it and
/// its pair loop's path, checks the published values, and refuses what it
/// cannot take (exit 2).
#[test]
fn solve_by_the_join_is_exact_and_refuses_what_it_cannot_take() {
    for args in [
        &["solve", "13", "--mode", "join"][..],
        &["solve", "14", "--mode", "join", "--core", "scalar"],
        &["solve", "12", "--mode", "join", "--strategy", "frame"],
        &[
            "solve",
            "12",
            "--mode",
            "join",
            "--strategy",
            "rings",
            "--depth",
            "2",
        ],
        &["solve", "11", "--strategy", "halves", "--tasks", "5"],
        // --tasks without --strategy: the default plan (here halves).
        &["solve", "12", "--mode", "join", "--tasks", "7"],
    ] {
        let o = nqueens(&[args, &["--json"]].concat());
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let v = json(stdout(&o).trim());
        let core = v["core"].as_str().unwrap();
        assert!(core.starts_with("join/"), "{args:?}: {v}");
        if args.contains(&"scalar") {
            assert_eq!(core, "join/scalar");
        }
        assert_eq!(v["matches_known"], true, "{v}");
    }
    let o = nqueens(&["solve", "25", "--mode", "join"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("N=4 to N=24"), "{}", stderr(&o));
    assert!(stderr(&o).contains("--mode backtrack"), "{}", stderr(&o));
    // Past the memory bound, where the join is the default: the advice
    // names the flag that changes the mode.
    let o = nqueens(&["solve", "19", "--memory", "1M"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("(--mode backtrack)"), "{}", stderr(&o));
    for bad in [
        &["solve", "12", "--strategy", "halves", "--mode", "backtrack"][..],
        &["solve", "12", "--strategy", "halves", "--depth", "2"],
        &["solve", "25", "--strategy", "halves"],
    ] {
        let o = nqueens(bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("halves"), "{bad:?}: {}", stderr(&o));
    }
    // A memory bound too small for the board: refused before counting,
    // saying what to do; a bound that fits counts.
    let o = nqueens(&["solve", "16", "--mode", "join", "--memory", "1M"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--memory"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    let o = nqueens(&["solve", "14", "--mode", "join", "--memory", "64M"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for bad in [
        &["solve", "14", "--memory", "64M"][..],
        &["solve", "14", "--mode", "join", "--memory", "5X"],
    ] {
        let o = nqueens(bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
    }
}

#[test]
fn solve_json_has_every_field() {
    let o = nqueens(&["solve", "10", "--json", "--threads", "1"]);
    assert!(o.status.success());
    let v = json(stdout(&o).trim());
    assert_eq!(v["n"], 10);
    assert_eq!(kit::dec(&v["total"]), 724);
    assert_eq!(kit::dec(&v["unique"]), 92);
    assert_eq!(v["threads"], 1);
    assert_eq!(v["matches_known"], true);
    assert!(kit::dec(&v["nodes"]) > 0);
    assert_eq!(
        kit::dec(&v["c8"]) * 8 + kit::dec(&v["c4"]) * 4 + kit::dec(&v["c2"]) * 2,
        724
    );
    assert!(v["seconds"].as_f64().is_some());
}

#[test]
fn bad_sizes_exit_2_with_a_clear_message() {
    for (arg, needle) in [
        ("0", "between 1 and 32"),
        ("33", "between 1 and 32"),
        ("abc", "whole number"),
        ("-3", ""),
    ] {
        let o = nqueens(&["solve", arg]);
        assert_eq!(o.status.code(), Some(2), "solve {arg}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "solve {arg}: {}", stderr(&o));
        assert!(o.stdout.is_empty());
    }
    let o = nqueens(&["solve", "8", "--threads", "0"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn table_prints_one_row_per_n() {
    let o = nqueens(&["table", "4..9"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 1 + 6, "{text}");
    assert!(rows[0].contains("Total") && rows[0].contains("hh:mm:ss.ms"));
    let eight: Vec<&str> = rows[5].split_whitespace().collect();
    assert_eq!(&eight[..3], ["8", "92", "12"]);
    // hh:mm:ss.ms
    let t = eight[3];
    assert!(t.len() == 12 && &t[2..3] == ":" && &t[8..9] == ".", "{t}");
}

#[test]
fn table_json_and_range_errors() {
    let o = nqueens(&["table", "10..=12", "--json"]);
    assert!(o.status.success());
    let ns: Vec<u64> = stdout(&o)
        .lines()
        .map(|l| json(l)["n"].as_u64().unwrap())
        .collect();
    assert_eq!(ns, [10, 11, 12]);
    let o = nqueens(&["table", "12..10"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("FROM <= TO"), "{}", stderr(&o));
}

#[test]
fn boards_rows_and_board_formats() {
    let o = nqueens(&["boards", "5", "--limit", "3"]);
    assert!(o.status.success());
    assert_eq!(stdout(&o), "1: 0 2 4 1 3\n2: 0 3 1 4 2\n3: 1 3 0 2 4\n");
    let o = nqueens(&["boards", "4", "--format", "board"]);
    assert_eq!(
        stdout(&o),
        "# 1\n.Q..\n...Q\nQ...\n..Q.\n\n# 2\n..Q.\nQ...\n...Q\n.Q..\n\n"
    );
}

#[test]
fn boards_lists_every_solution_of_twelve() {
    let o = nqueens(&["boards", "12"]);
    assert!(o.status.success());
    let text = stdout(&o);
    assert_eq!(text.lines().count(), 14_200);
    assert!(text.lines().last().unwrap().starts_with("14200: "));
}

#[test]
fn boards_stops_quietly_when_the_reader_leaves() {
    // A reader that closes the pipe early (like `head`) is not an error.
    let mut child = Command::new(kit::binary())
        .args(["boards", "14"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 64];
    std::io::Read::read_exact(&mut out, &mut first).unwrap();
    drop(out);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{:?} {}", o.status, stderr(&o));
}

#[test]
fn complete_the_issue_example() {
    let o = run(&["complete"], Some("2\n2 2\n5 3\n"));
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<Vec<char>> = stdout(&o).lines().map(|l| l.chars().collect()).collect();
    assert_eq!(rows.len(), 8);
    assert!(rows
        .iter()
        .all(|r| r.len() == 8 && r.iter().filter(|&&c| c == 'Q').count() == 1));
    assert_eq!(rows[2][2], 'Q');
    assert_eq!(rows[5][3], 'Q');
    let cols: Vec<usize> = rows
        .iter()
        .map(|r| r.iter().position(|&c| c == 'Q').unwrap())
        .collect();
    for i in 0..8 {
        for j in i + 1..8 {
            assert!(
                cols[i] != cols[j] && cols[i].abs_diff(cols[j]) != j - i,
                "attack {cols:?}"
            );
        }
    }
}

#[test]
fn complete_other_sizes_and_no_queens() {
    let o = run(&["complete", "--n", "20"], Some("0\n"));
    assert!(o.status.success());
    assert_eq!(stdout(&o).lines().count(), 20);
}

#[test]
fn complete_rejects_bad_input_with_exit_2() {
    let cases = [
        ("", "empty input"),
        ("two\n", "number of queens"),
        ("2\n1 1\n", "found only 1"),
        ("1\n1\n", "expected 'row col'"),
        ("1\n8 0\n", "off the 8x8 board"),
        ("2\n1 0\n1 5\n", "row 1 already"),
        ("2\n1 5\n3 5\n", "column 5 already"),
        ("2\n0 0\n3 3\n", "diagonal"),
        ("1\n0 0\nextra\n", "unexpected text"),
    ];
    for (input, needle) in cases {
        let o = run(&["complete"], Some(input));
        assert_eq!(o.status.code(), Some(2), "{input:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{input:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{input:?}");
    }
}

#[test]
fn complete_without_solution_exits_1() {
    let o = run(&["complete", "--n", "4"], Some("1\n0 0\n"));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no 4x4 board"), "{}", stderr(&o));
}

#[test]
fn every_subcommand_help_has_an_example() {
    for sub in ["solve", "plan", "bench", "table", "boards", "complete"] {
        let o = nqueens(&[sub, "--help"]);
        assert!(o.status.success());
        let text = stdout(&o);
        assert!(text.contains("Example"), "{sub} --help:\n{text}");
        assert!(
            text.contains(&format!("nqueens {sub}")) || sub == "complete",
            "{sub}"
        );
    }
}

#[test]
fn solve_through_either_plan_is_exact() {
    for strategy in ["prefix", "frame", "rings"] {
        let o = nqueens(&[
            "solve",
            "13",
            "--strategy",
            strategy,
            "--tasks",
            "50",
            "--json",
        ]);
        assert!(o.status.success(), "{strategy}: {}", stderr(&o));
        let v = json(stdout(&o).trim());
        assert_eq!(
            (kit::dec(&v["total"]), kit::dec(&v["unique"])),
            (73_712, 9_233),
            "{strategy}"
        );
    }
    // Through a coordinator (a resumable run), the job says its plan.
    let dir = kit::tempdir();
    let state = dir.path().join("state");
    let o = nqueens(&[
        "solve",
        "13",
        "--strategy",
        "rings",
        "--depth",
        "2",
        "--state",
        state.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(stdout(&o).trim().lines().last().unwrap());
    assert_eq!(
        (v["strategy"].as_str(), v["depth"].as_u64()),
        (Some("rings"), Some(2)),
        "{v}"
    );
    assert_eq!(kit::dec(&v["total"]), 73_712, "{v}");
}

/// Without --mode and --strategy, N=18 to 21 are planned as halves for
/// the join and the boards around them backtrack; a strategy or a mode
/// named wins over that default.
#[test]
fn the_planner_joins_18_to_21_unless_told_otherwise() {
    let summary = |args: &[&str]| {
        let o = nqueens(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let v = json(stdout(&o).trim());
        (
            v["mode"].as_str().unwrap().to_string(),
            v["strategy"].as_str().unwrap().to_string(),
        )
    };
    let pair = |m: &str, s: &str| (m.to_string(), s.to_string());
    for n in ["18", "21"] {
        assert_eq!(
            summary(&["plan", n, "--json"]),
            pair("join", "halves"),
            "N={n}"
        );
    }
    assert_eq!(
        summary(&["plan", "17", "--json"]),
        pair("backtrack", "frame")
    );
    assert_eq!(
        summary(&["plan", "22", "--json"]),
        pair("backtrack", "rings")
    );
    assert_eq!(
        summary(&["plan", "18", "--strategy", "frame", "--json"]),
        pair("backtrack", "frame")
    );
    assert_eq!(
        summary(&["plan", "19", "--mode", "backtrack", "--json"]),
        pair("backtrack", "frame")
    );
    // `solve` counts in that mode: the default join is held to --memory
    // (refused at once within 1 MB), a backtracking board refuses --memory.
    let o = nqueens(&["solve", "18", "--memory", "1M"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("memory bound"), "{}", stderr(&o));
    let o = nqueens(&["solve", "17", "--memory", "1M"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--memory bounds the join"),
        "{}",
        stderr(&o)
    );
}

/// `--tasks 2000` gives 2,000 tasks, whatever the strategy and mode.
#[test]
fn plan_makes_the_tasks_asked_for() {
    for args in [
        &["plan", "17", "--strategy", "frame"][..],
        &["plan", "20", "--strategy", "prefix"],
        &["plan", "18", "--mode", "join"],
        &["plan", "22"],
    ] {
        let o = nqueens(&[args, &["--tasks", "2000", "--json"]].concat());
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let v = json(stdout(&o).trim());
        let tasks: u64 = v["tasks"].as_str().unwrap().parse().unwrap();
        assert_eq!(tasks, 2000, "{args:?}");
    }
}

/// `solve` through a plan says which plan and how many tasks, `--tasks`
/// alone taking N's default plan; cut into pieces in memory, no plan.
#[test]
fn solve_names_the_plan_it_counted_through() {
    for (args, want) in [
        (
            &["solve", "12", "--tasks", "5"][..],
            Some("frame (depth 1) by backtrack, 5 tasks"),
        ),
        (
            &["solve", "12", "--strategy", "prefix", "--depth", "3"],
            Some("prefix (depth 3) by backtrack, "),
        ),
        (&["solve", "12"], None),
    ] {
        let o = nqueens(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let line = stdout(&o)
            .lines()
            .find(|l| l.starts_with("plan "))
            .map(str::to_string);
        match want {
            Some(w) => assert!(
                line.as_ref().is_some_and(|l| l.contains(w)),
                "{args:?}: {line:?}"
            ),
            None => assert_eq!(line, None, "{args:?}"),
        }
        let v = json(stdout(&nqueens(&[args, &["--json"]].concat())).trim());
        assert_eq!(v["plan"].is_string(), want.is_some(), "{args:?}: {v}");
    }
}

/// A plan cut finer than its groups says how small the table a coordinator
/// keeps of it is: runs, not tasks.
#[test]
fn plan_reports_its_task_table_in_runs_far_fewer_than_its_tasks() {
    let args = [
        "plan",
        "14",
        "--strategy",
        "frame",
        "--depth",
        "2",
        "--tasks",
        "200000",
    ];
    let o = nqueens(&[&args[..], &["--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = json(stdout(&o).trim());
    let (tasks, runs) = (
        kit::dec(&summary["tasks"]),
        kit::dec(&summary["table_runs"]),
    );
    assert!(tasks > 100_000 && runs * 50 < tasks, "{summary}");
    let text = stdout(&nqueens(&args));
    let line = text.lines().find(|l| l.starts_with("table ")).expect(&text);
    let shown: u128 = line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap();
    assert_eq!(shown, runs, "{line}");
}

#[test]
fn plan_summary_and_listing_agree() {
    let o = nqueens(&[
        "plan",
        "10",
        "--strategy",
        "frame",
        "--tasks",
        "20",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = json(stdout(&o).trim());
    let subproblems = kit::dec(&summary["subproblems"]) as u64;
    let tasks = kit::dec(&summary["tasks"]) as u64;
    let classes = summary["classes"].as_array().unwrap();
    let in_classes: u128 = classes.iter().map(|c| kit::dec(&c[1])).sum();
    assert_eq!(in_classes, u128::from(subproblems), "{summary}");
    assert!(subproblems > 100 && tasks >= 10, "{summary}");

    let o = nqueens(&[
        "plan",
        "10",
        "--strategy",
        "frame",
        "--tasks",
        "20",
        "--list",
        "--json",
    ]);
    let lines: Vec<serde_json::Value> = stdout(&o).lines().map(json).collect();
    assert_eq!(lines.len() as u64, subproblems);
    let ids: std::collections::BTreeSet<u64> =
        lines.iter().map(|l| kit::dec(&l["id"]) as u64).collect();
    assert_eq!(ids.len() as u64, subproblems, "ids are distinct");
    let last_task = kit::dec(&lines.last().unwrap()["task"]) as u64;
    assert_eq!(last_task + 1, tasks);

    // One task alone lists exactly its part of the full listing.
    let o = nqueens(&[
        "plan",
        "10",
        "--strategy",
        "frame",
        "--tasks",
        "20",
        "--task",
        "3",
        "--json",
    ]);
    let part: Vec<serde_json::Value> = stdout(&o).lines().map(json).collect();
    let expected: Vec<&serde_json::Value> = lines.iter().filter(|l| l["task"] == "3").collect();
    assert_eq!(part.iter().collect::<Vec<_>>(), expected);
}

#[test]
fn plan_text_names_the_classes() {
    let o = nqueens(&["plan", "12", "--strategy", "prefix", "--depth", "3"]);
    assert!(o.status.success());
    let text = stdout(&o);
    assert!(
        text.contains("prefix (depth 3)")
            && text.contains("prefixes of weight 2")
            && text.contains("half-turn searches"),
        "{text}"
    );
}

#[test]
fn bad_plan_options_exit_2() {
    let cases: [(&[&str], &str); 7] = [
        (
            &["plan", "10", "--strategy", "spiral"],
            "[possible values: frame, rings, prefix, halves, synthetic]",
        ),
        (
            &["plan", "10", "--strategy", "rings", "--depth", "4"],
            "use 1 to 3 (free rows placed inside each ring",
        ),
        (
            &["solve", "10", "--strategy", "synthetic"],
            "a synthetic plan counts no queens",
        ),
        (
            &["plan", "10", "--strategy", "frame", "--depth", "9"],
            "use 1 (rings, the 4 border lines) or 2",
        ),
        (
            &["plan", "10", "--strategy", "prefix", "--depth", "1"],
            "depth must be between 2 and 11",
        ),
        (
            &["plan", "10", "--strategy", "frame", "--tasks", "0"],
            "at least 1",
        ),
        (
            &[
                "plan",
                "10",
                "--strategy",
                "frame",
                "--tasks",
                "5",
                "--task",
                "500",
            ],
            "task 500 does not exist",
        ),
    ];
    for (args, needle) in cases {
        let o = nqueens(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn bench_reports_both_cores_and_the_ratio() {
    let o = nqueens(&["bench", "8..9", "--json", "--threads", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = stdout(&o).lines().map(json).collect();
    assert_eq!(rows.len(), 2);
    for (row, n) in rows.iter().zip([8, 9]) {
        assert_eq!(row["n"], n);
        assert_eq!(row["threads"], 2);
        assert!(kit::dec(&row["nodes"]) > 0);
        assert!(row["speedup_vs_baseline"].as_f64().unwrap() > 0.0);
    }
    let o = nqueens(&["bench", "8", "--no-baseline"]);
    assert!(o.status.success());
    assert!(
        stdout(&o).starts_with("cpu: ")
            && stdout(&o).lines().nth(2).unwrap().trim_end().ends_with('-'),
        "{}",
        stdout(&o)
    );
}

#[test]
fn bench_names_the_core_and_takes_the_one_asked_for() {
    let core_of = |args: &[&str]| {
        let o = nqueens(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        json(stdout(&o).lines().next().unwrap())["core"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let auto = core_of(&["bench", "10", "--json", "--no-baseline"]);
    assert!(
        ["avx512", "avx2", "scalar"].contains(&auto.as_str()),
        "{auto}"
    );
    let scalar = core_of(&["bench", "10", "--json", "--no-baseline", "--core", "scalar"]);
    assert_eq!(scalar, "scalar");
    // AVX2 where the CPU has it (every x86-64 since 2013).
    let o = nqueens(&["solve", "10", "--core", "avx2"]);
    if nqueens_common::engine::lanes::Path::Avx2.supported() {
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stdout(&o).contains("avx2"), "{}", stdout(&o));
    } else {
        println!("avx2 not checked: this CPU lacks AVX2");
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    }
    // AVX-512 where the CPU has it (auto may still take AVX2: a race
    // picks the faster); elsewhere a clear refusal.
    let o = nqueens(&["bench", "10", "--no-baseline", "--core", "avx512"]);
    if nqueens_common::engine::lanes::Path::Avx512.supported() {
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stdout(&o).contains("avx512"), "{}", stdout(&o));
    } else {
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("cores available here: scalar"),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn completions_cover_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let o = nqueens(&["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        for sub in ["solve", "submit", "watch", "workers", "cancel"] {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    let o = nqueens(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn plan_estimate_projects_the_whole_plan() {
    let o = nqueens(&[
        "plan",
        "13",
        "--strategy",
        "frame",
        "--estimate",
        "--seconds",
        "1",
        "--mode",
        "backtrack",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = json(stdout(&o).trim());
    assert_eq!(e["mode"], "backtrack");
    assert_eq!(e["subproblems_exact"], true);
    // A count, a decimal string as in `plan --json`.
    let subproblems = kit::dec(&e["subproblems"]) as f64;
    let nodes = e["nodes_per_subproblem"].as_f64().unwrap() * subproblems;
    // The plan's own count of the same N visits this many nodes in its
    // prefix and frame subproblems (all but the small symmetric searches).
    let solved = nqueens(&[
        "solve",
        "13",
        "--strategy",
        "frame",
        "--depth",
        "1",
        "--json",
    ]);
    let real = kit::dec(&json(stdout(&solved).trim())["nodes"]) as f64;
    assert!(
        (nodes / real - 1.0).abs() < 0.1,
        "estimated {nodes} nodes, counted {real}"
    );
    assert!(e["core_seconds"].as_f64().unwrap() > 0.0);
    assert!(!e["path"].as_str().unwrap().is_empty());
    // Estimating is not listing.
    let o = nqueens(&["plan", "13", "--strategy", "frame", "--estimate", "--list"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// Without --mode, `plan --estimate` projects both modes, each on its own
/// default plan (the join on whole boards' halves), says which is faster,
/// and gives the memory a join task needs; the join's projection counts
/// every choice of the plan.
#[test]
fn plan_estimate_projects_both_modes_and_the_joins_memory() {
    let o = nqueens(&["plan", "14", "--estimate", "--seconds", "2", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o).lines().map(json).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        (&lines[0]["mode"], &lines[1]["mode"]),
        (&"backtrack".into(), &"join".into())
    );
    let join = &lines[1];
    assert_eq!(join["strategy"], "halves");
    assert!(join["path"].as_str().unwrap().len() > 1, "{join}");
    assert!(kit::dec(&join["task_bytes"]) > 0, "{join}");
    assert!(join["core_seconds"].as_f64().unwrap() > 0.0, "{join}");
    let plan = nqueens(&["plan", "14", "--strategy", "halves", "--json"]);
    let summary = json(stdout(&plan).trim());
    let choices = kit::dec(&summary["subproblems"]) - 2 * 14;
    assert_eq!(kit::dec(&join["subproblems"]), choices);
    assert_eq!(join["subproblems_exact"], true);
    let text = nqueens(&["plan", "12", "--estimate", "--seconds", "1"]);
    assert!(text.status.success(), "{}", stderr(&text));
    let text = stdout(&text);
    for part in [
        "counted by backtrack",
        "counted by join",
        "memory",
        "faster here:",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
}

#[test]
fn bench_every_core_times_each_path_this_cpu_has() {
    let o = nqueens(&["bench", "9", "--every-core", "--no-baseline", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cores: Vec<String> = stdout(&o)
        .lines()
        .map(|l| json(l)["core"].as_str().unwrap().to_string())
        .collect();
    let want: Vec<String> = nqueens_common::engine::lanes::Path::available()
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    assert_eq!(cores, want);
}

/// `solve --state` runs the worker's self-test itself (while its
/// coordinator starts), of the search its plan counts with: a failing one
/// stops the run with the self-test's message before anything is counted,
/// and a sound run in the same directory then counts every task.
#[test]
fn a_failing_self_test_stops_solve_state_before_any_count() {
    for mode in ["backtrack", "join"] {
        let dir = kit::tempdir();
        let state = dir.path().join("state");
        let state = state.to_str().unwrap();
        let args = ["solve", "10", "--mode", mode, "--state", state];
        let o = nqueens(&[&args[..], &["--self-test-fault"]].concat());
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("self-test failed")
                && stderr(&o).contains(&format!("({mode})"))
                && stderr(&o).contains("must not report results"),
            "{}",
            stderr(&o)
        );
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
        let o = nqueens(&[&args[..], &["--json"]].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        let v = json(stdout(&o).trim().lines().last().unwrap());
        assert_eq!(kit::dec(&v["run"]["tasks_before"]), 0, "{v}");
        assert_eq!(kit::dec(&v["total"]), 724, "{v}");
    }
}

/// `--core gpu` counts on the machine's card (lavapipe in CI): exact,
/// named in the text and JSON output and in `bench`, resumable with
/// `--state`, and the join (which counts on the CPU) is refused with exit 2.
#[test]
fn solve_on_a_card_is_exact_and_names_the_card() {
    if !kit::gpu_here() {
        return;
    }
    let o = nqueens(&["solve", "13", "--core", "gpu", "--threads", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("total    73712\n"), "{text}");
    assert!(text.contains("matches OEIS"), "{text}");
    assert!(text.contains("pieces, gpu:"), "{text}");
    // How busy the card was: a share of its launches' steps.
    let busy = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("card     ")?
                .split('%')
                .next()?
                .parse::<f64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("a card line: {text}"));
    assert!(busy > 0.0 && busy <= 100.0, "{text}");
    assert!(text.contains(" searches at once\n"), "{text}");

    let o = nqueens(&[
        "solve",
        "12",
        "--core",
        "gpu",
        "--strategy",
        "prefix",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j = json(stdout(&o).trim());
    assert!(j["core"].as_str().unwrap().starts_with("gpu:"), "{j}");
    assert_eq!(kit::dec(&j["total"]), 14_200, "{j}");
    let busy = j["card_busy"].as_f64().unwrap();
    assert!(busy > 0.0 && busy <= 1.0, "{j}");
    assert!(j["card_searches"].as_u64().unwrap() >= 1, "{j}");
    // Fed by the threads the card asks for, unless --threads says.
    let fed = |extra: &[&str]| {
        let mut args = vec!["solve", "11", "--core", "gpu", "--json"];
        args.extend(extra);
        let o = Command::new(kit::binary())
            .args(&args)
            .env("NQUEENS_GPU_FEEDERS", "3")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        json(stdout(&o).trim())["threads"].as_u64().unwrap()
    };
    assert_eq!(fed(&[]), 3);
    assert_eq!(fed(&["--threads", "5"]), 5);

    let dir = kit::tempdir();
    let state = dir.path().join("s");
    let o = nqueens(&[
        "solve",
        "12",
        "--core",
        "gpu",
        "--state",
        state.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("total    14200\n"), "{}", stdout(&o));

    let o = nqueens(&[
        "bench",
        "9..10",
        "--core",
        "gpu",
        "--runs",
        "1",
        "--no-baseline",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.lines().nth(1).unwrap().starts_with("gpu:"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains(" gpu ")).count(),
        2,
        "{text}"
    );

    let o = nqueens(&["solve", "12", "--core", "gpu", "--mode", "join"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("counts by backtracking"),
        "{}",
        stderr(&o)
    );
}

/// `bench --core gpu --tune` counts N under each turn of each knob (every
/// count checked), and the settings it names as fastest are the ones a
/// count run with them uses; without `--core gpu` it is refused.
#[test]
fn tuning_a_card_names_settings_that_a_count_then_uses() {
    let o = nqueens(&["bench", "11", "--tune"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("add --core gpu"), "{}", stderr(&o));
    if !kit::gpu_here() {
        return;
    }
    let o = nqueens(&["bench", "11", "--core", "gpu", "--tune", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o).lines().map(json).collect();
    let (last, trials) = lines.split_last().unwrap();
    // The start, then two turns of each knob but the loop's and the
    // tables' one.
    assert!(trials.len() >= 9, "{}", stdout(&o));
    assert_eq!(trials[0]["knob"], "start");
    for knob in ["loop", "tables", "steps", "feeders", "jobs", "launches"] {
        assert!(trials.iter().any(|t| t["knob"] == knob), "{knob}");
    }
    for t in trials {
        assert!(t["seconds"].as_f64().unwrap() > 0.0, "{t}");
        assert!(t["searches"].as_u64().unwrap() >= 1, "{t}");
    }
    let fastest: Vec<(String, String)> = last["fastest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| {
            let (k, v) = kv.as_str().unwrap().split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    let setting = |name: &str| {
        let kv = fastest.iter().find(|(k, _)| k == name);
        kv.unwrap_or_else(|| panic!("{name} in {fastest:?}"))
            .1
            .clone()
    };
    let o = Command::new(kit::binary())
        .args(["solve", "11", "--core", "gpu", "--json"])
        .envs(fastest.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let j = json(stdout(&o).trim());
    assert_eq!(kit::dec(&j["total"]), 2680, "{j}");
    assert_eq!(
        j["threads"].as_u64().unwrap().to_string(),
        setting("NQUEENS_GPU_FEEDERS")
    );
    // A software device's searches are given; a card's, its measured width.
    let searches = j["card_searches"].as_u64().unwrap().to_string();
    if fastest.iter().any(|(k, _)| k == "NQUEENS_GPU_SLOTS") {
        assert_eq!(searches, setting("NQUEENS_GPU_SLOTS"));
    }
}

/// `tests/bench/card.sh`, the GPU path's figures on a machine with a card,
/// runs end to end on this machine's device with small N: every count
/// checked, the tuner's settings taken, a sweep of settings timed, the
/// worker's total equal to the local count's.
#[test]
fn the_card_benchmark_script_runs_end_to_end() {
    if !kit::gpu_here() {
        return;
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bench/card.sh");
    let o = Command::new("bash")
        .arg(&script)
        .arg(kit::binary())
        .envs([("NS", "10 11"), ("TUNE_N", "10"), ("LOOP_N", "11")])
        .env("SWEEP", "NQUEENS_GPU_FEEDERS=1 NQUEENS_GPU_FEEDERS=2")
        .output()
        .unwrap();
    let text = stdout(&o);
    assert!(o.status.success(), "{text}\n{}", stderr(&o));
    assert_eq!(text.matches("matches OEIS").count(), 3, "{text}");
    assert!(text.contains("fastest: "), "{text}");
    assert!(text.contains("with   NQUEENS_GPU_STEPS="), "{text}");
    let rate = text
        .split("the card's rate at N=10 with those settings: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|r| r.parse::<f64>().ok());
    assert!(rate.is_some_and(|r| r > 0.0), "{text}");
    assert!(text.contains("== sweep at N=10: as it is, "), "{text}");
    for kv in ["NQUEENS_GPU_FEEDERS=1: ", "NQUEENS_GPU_FEEDERS=2: "] {
        assert!(text.contains(kv), "{text}");
    }
    assert!(text.contains("total 2,680,"), "{text}");
    assert!(text.contains("of local's rate"), "{text}");
}

/// `plan --estimate --gpu-rate R` projects the backtracking's nodes at R
/// nodes/s per card, in text and JSON; the join has no GPU time.
#[test]
fn estimate_projects_gpu_hours_from_a_measured_rate() {
    let o = nqueens(&[
        "plan",
        "19",
        "--estimate",
        "--mode",
        "backtrack",
        "--seconds",
        "1",
        "--gpu-rate",
        "2e9",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(stdout(&o).trim());
    let nodes = v["core_seconds"].as_f64().unwrap() * v["nodes_per_second"].as_f64().unwrap();
    let hours = v["gpu_hours"].as_f64().unwrap();
    assert!((hours - nodes / 2e9 / 3600.0).abs() <= 1e-9 * hours, "{v}");
    let o = nqueens(&[
        "plan",
        "19",
        "--estimate",
        "--seconds",
        "1",
        "--gpu-rate",
        "2e9",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(
        text.matches("GPU-hours").count(),
        1,
        "only the backtracking: {text}"
    );
    let o = nqueens(&["plan", "19", "--estimate", "--gpu-rate", "-1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// `submit --cross-device` is refused before any call (exit 2) without
/// redundancy, and for a plan counted by the join (the default mode of
/// N=18..21), which no card counts.
#[test]
fn cross_device_needs_redundancy_and_a_backtracking_plan() {
    let at = ["--coordinator", "http://127.0.0.1:9"];
    for (args, why) in [
        (
            &["submit", "12", "--cross-device"][..],
            "--redundancy 2 or 3",
        ),
        (
            &["submit", "20", "--redundancy", "2", "--cross-device"],
            "--mode backtrack",
        ),
    ] {
        let o = nqueens(&[args, &at[..]].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(why), "{args:?}: {}", stderr(&o));
    }
}

/// The help of `args` at a terminal `columns` wide.
fn help_at(args: &[&str], columns: usize) -> String {
    let out = Command::new(kit::binary())
        .args(args)
        .arg("--help")
        .env("COLUMNS", columns.to_string())
        .output()
        .expect("start nqueens");
    assert!(out.status.success(), "{args:?} --help");
    String::from_utf8(out.stdout).unwrap()
}

/// Every command with a help page: the top level, each subcommand, each
/// token action.
fn commands() -> Vec<Vec<String>> {
    let top = help_at(&[], 200);
    let listed = |help: &str| -> Vec<String> {
        help.lines()
            .skip_while(|l| *l != "Commands:")
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next().map(String::from))
            .filter(|c| c != "help")
            .collect()
    };
    let mut all = vec![vec![]];
    for c in listed(&top) {
        let sub = help_at(&[c.as_str()], 200);
        all.extend(listed(&sub).into_iter().map(|s| vec![c.clone(), s]));
        all.push(vec![c]);
    }
    all
}

/// At 80 columns every line of every help fits; examples are written to
/// fit (a long one continues after a `\`, never splits a flag from its
/// value), and prose is left for the terminal to wrap (no hard line
/// breaks that leave ragged lines at other widths).
#[test]
fn every_help_fits_80_columns_and_wraps_its_prose_cleanly() {
    let commands = commands();
    assert!(commands.len() > 25, "{commands:?}");
    for c in &commands {
        let args: Vec<&str> = c.iter().map(String::as_str).collect();
        for line in help_at(&args, 80).lines() {
            assert!(line.chars().count() <= 80, "{args:?}: {line}");
        }
        let wide = help_at(&args, 200);
        let lines: Vec<&str> = wide.lines().collect();
        let mut in_examples = false;
        for (i, line) in lines.iter().enumerate() {
            in_examples = match *line {
                "Examples:" => true,
                "" => false,
                _ => in_examples,
            };
            let next = lines.get(i + 1).copied().unwrap_or("");
            if in_examples && line.starts_with("  ") {
                assert!(line.chars().count() <= 80, "{args:?}: example {line}");
                if next.starts_with("      ") {
                    assert!(line.ends_with('\\'), "{args:?}: {line} / {next}");
                }
            }
            // An epilogue's prose wraps at the terminal's width only: a
            // line followed by more of its paragraph is nearly full.
            let prose = |l: &str| !l.is_empty() && !l.starts_with(' ') && !l.ends_with(':');
            if !in_examples && prose(line) && prose(next) {
                assert!(
                    line.chars().count() > 200 - 30,
                    "{args:?}: a hard line break in prose: {line} / {next}"
                );
            }
        }
    }
}

/// Mistakes in where things are: each named with what to give instead.
#[test]
fn a_data_dir_that_is_a_file_and_a_foreign_scheme_are_named() {
    let dir = kit::tempdir();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let o = nqueens(&["coordinator", "--data-dir", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is a file, not a directory"),
        "{}",
        stderr(&o)
    );
    for (url, says) in [
        ("ftp://x", "ftp:// is not a scheme a coordinator speaks"),
        ("localhost:7700", "no scheme"),
    ] {
        let o = nqueens(&["status", "--coordinator", url]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(says), "{}", stderr(&o));
        // A worker says so too, before its self-test counts anything.
        let o = nqueens(&["worker", "--coordinator", url, "--threads", "1"]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(says), "{}", stderr(&o));
        assert!(!stderr(&o).contains("self-test"), "{}", stderr(&o));
    }
}

/// A mistyped `NQUEENS_GPU_*` setting stops `solve --core gpu`, `bench
/// --core gpu` and a GPU worker before they count or connect, naming the
/// setting and what it takes (with or without a device here).
#[test]
fn a_mistyped_gpu_setting_is_refused_before_anything_counts() {
    let commands: [&[&str]; 4] = [
        &["solve", "10", "--core", "gpu"],
        &["bench", "10", "--core", "gpu"],
        &[
            "worker",
            "--coordinator",
            "http://127.0.0.1:9",
            "--gpus",
            "auto",
        ],
        &[
            "worker",
            "--coordinator",
            "http://127.0.0.1:9",
            "--core",
            "gpu",
        ],
    ];
    for args in commands {
        let o = Command::new(kit::binary())
            .args(args)
            .env("NQUEENS_GPU_LOOP", "singel")
            .output()
            .expect("start nqueens");
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("NQUEENS_GPU_LOOP=\"singel\": give nested or single"),
            "{args:?}: {err}"
        );
        assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
    }
}

/// `NQUEENS_GPU_API=cuda` counts on a CUDA card, named as one; on a
/// machine without CUDA's driver or NVRTC, `solve`, `bench` (its tuner
/// too) and a worker counting on cards alone stop before they count or
/// connect, naming the library to install (a worker's `--gpus auto` alone finds no card, and
/// counts on the CPU, as with wgpu).
#[test]
fn cuda_cards_are_counted_on_or_the_missing_library_is_named() {
    let commands: [&[&str]; 4] = [
        &["solve", "10", "--core", "gpu"],
        &["bench", "10", "--core", "gpu", "--no-baseline"],
        &["bench", "10", "--core", "gpu", "--tune"],
        &[
            "worker",
            "--coordinator",
            "http://127.0.0.1:9",
            "--core",
            "gpu",
        ],
    ];
    for args in commands {
        let o = Command::new(kit::binary())
            .args(args)
            .env("NQUEENS_GPU_API", "cuda")
            .output()
            .expect("start nqueens");
        let (out, err) = (stdout(&o), stderr(&o));
        if o.status.success() && args[0] == "solve" {
            assert!(out.contains("(cuda)"), "{args:?}: {out}");
            println!("this machine has a CUDA card: the missing library is not tried");
            return;
        }
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("libcuda.so")
                || err.contains("libnvrtc.so")
                || err.contains("no CUDA card number 0"),
            "{args:?}: {err}"
        );
        assert!(out.is_empty(), "{args:?}: {out}");
    }
}

/// A job id that is not a number is bad input, said as such for every
/// command that takes one; so is a watch interval of 0.
#[test]
fn a_job_id_that_is_not_a_number_is_named_as_one() {
    for cmd in ["status", "watch", "export", "audit", "cancel", "retry"] {
        let o = nqueens(&[cmd, "abc"]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("'abc' is not a job id"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
    let o = nqueens(&["watch", "1", "--interval", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("above 0"), "{}", stderr(&o));
}

/// Looking for a card prints nothing of the Vulkan layers' own on a
/// machine with no display (Mesa's device-select layer made libwayland
/// print an `error:` line about XDG_RUNTIME_DIR twice).
#[test]
fn looking_for_a_card_prints_no_display_errors() {
    if !kit::gpu_here() {
        return;
    }
    let o = Command::new(kit::binary())
        .args(["solve", "8", "--core", "gpu"])
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("NODEVICE_SELECT")
        .output()
        .expect("start nqueens");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("XDG_RUNTIME_DIR"), "{}", stderr(&o));
}

/// A negative N is a bad size, said as such (not taken for a flag).
#[test]
fn a_negative_n_is_a_bad_size() {
    for cmd in ["solve", "plan", "submit"] {
        let o = nqueens(&[cmd, "-1"]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("between 1 and 32, got '-1'"), "{cmd}: {err}");
        assert!(!err.contains("-- -1"), "{cmd}: {err}");
    }
    // A range written some other way is shown how to write one.
    for cmd in ["table", "bench"] {
        let o = nqueens(&[cmd, "4-8"]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("FROM..TO such as 4..16"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
}

/// An estimate keeps to its budget even where one subproblem takes many
/// times it (N=25 by the join: tens of seconds; at N=28, minutes): it
/// counts a random sample of that subproblem's choices, which stand for
/// the rest. Where subproblems are small (N=18, halves) every drawn one is
/// counted whole.
#[test]
fn an_estimate_samples_a_subproblem_too_long_for_its_budget() {
    for (n, whole) in [("18", true), ("25", false)] {
        let o = nqueens(&[
            "plan",
            n,
            "--estimate",
            "--mode",
            "join",
            "--seconds",
            "1",
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let e = json(stdout(&o).trim());
        let share = e["counted_share"].as_f64().unwrap();
        assert_eq!(share == 1.0, whole, "N={n}: {e}");
        assert!(
            share > 0.0 && e["core_seconds"].as_f64().unwrap() > 0.0,
            "{e}"
        );
    }
}

/// A resumable run whose journal lost a record to damage: `solve --state`
/// refuses, counting the loss and saying how to accept it through a
/// coordinator; followed, the run resumes and ends exact.
#[test]
fn a_damaged_state_directory_says_how_to_accept_the_loss() {
    let dir = kit::tempdir();
    let state = dir.path().join("state");
    let s = state.to_str().unwrap();
    let args = ["solve", "10", "--tasks", "30", "--state", s, "--json"];
    let o = nqueens(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    // A byte flipped in the middle of the biggest file of the journal.
    let mut files = vec![state.join("journal")];
    for e in std::fs::read_dir(state.join("journal.d"))
        .into_iter()
        .flatten()
    {
        files.push(e.unwrap().path());
    }
    let biggest = files
        .iter()
        .max_by_key(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .unwrap();
    let mut bytes = std::fs::read(biggest).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(biggest, &bytes).unwrap();
    let o = nqueens(&args);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("nqueens coordinator --data-dir"), "{err}");
    let n: String = err
        .split("--accept-lost-records ")
        .nth(1)
        .unwrap_or_else(|| panic!("no count: {err}"))
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let mut c = kit::start_with(&state, &["--accept-lost-records", &n]);
    kit::terminate(&c.child);
    assert!(c.child.wait().unwrap().success());
    let o = nqueens(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(stdout(&o).trim().lines().last().unwrap());
    assert_eq!((kit::dec(&v["total"]), kit::dec(&v["unique"])), (724, 92));
}

/// Messages on a standard error that cannot be written (a full disk) are
/// lost, and the run goes on to its own exit code: a resumable run
/// finishes, says it is done when run again, and refuses another plan as
/// it would otherwise. (Each message's `eprintln!` once panicked: 101.)
#[test]
fn a_standard_error_that_cannot_be_written_changes_no_exit_code() {
    let dir = kit::tempdir();
    let state = dir.path().join("state");
    let run = |n: &str| {
        Command::new(kit::binary())
            .args(["solve", n, "--threads", "1", "--state"])
            .arg(&state)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap()
    };
    for _ in 0..2 {
        let o = run("10");
        assert_eq!(o.status.code(), Some(0));
        assert!(stdout(&o).contains("724"), "{}", stdout(&o));
    }
    assert_eq!(run("11").status.code(), Some(2), "another plan is refused");
}
