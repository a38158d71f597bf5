//! Following a job until it ends: a progress bar on a terminal, plain
//! (or JSON) lines every few seconds otherwise. Survives coordinator
//! restarts: a broken stream is re-opened with backoff.

use crate::client::Operator;
use crate::exit::Failure;
use crate::format::thousands;
use crate::format::{json_line, text_width, wrap};
use crate::human::JobInfo;
use crate::opts::Progress;
use indicatif::{ProgressBar, ProgressStyle};
use nqueens_proto::refusal::Refusal;
use nqueens_worker::backoff::Backoff;
use std::io::{self, IsTerminal, Write};
use std::time::Duration;

/// Bar positions: per mille of the expected work.
const BAR_LEN: u64 = 1000;

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Show {
    /// A bar on a terminal, else plain lines.
    Text,
    /// JSON lines.
    Json,
    /// Nothing (the caller prints the outcome).
    Nothing,
}

impl Show {
    pub fn pick(json: bool) -> Show {
        if json {
            Show::Json
        } else {
            Show::Text
        }
    }
}

/// Shows the job's progress until it is done or cancelled; returns its
/// last snapshot. Fails at once if the job or the coordinator is not there.
pub async fn follow(
    op: &mut Operator,
    job: u64,
    progress: Progress,
    show: Show,
) -> Result<JobInfo, Failure> {
    let bar = (show == Show::Text && io::stdout().is_terminal()).then(new_bar);
    let lines = bar.is_none() && show != Show::Nothing;
    let json = show == Show::Json;
    let mut stream = op.watch(job).await?;
    let mut last: Option<JobInfo> = None;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(progress.interval));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        tokio::select! {
            msg = stream.message() => match msg {
                Ok(Some(j)) => {
                    backoff.reset();
                    let info = JobInfo::new(&j);
                    if let Some(bar) = &bar {
                        draw(bar, &info);
                    }
                    let ended = info.ended();
                    last = Some(info);
                    if ended {
                        break;
                    }
                }
                // The coordinator said it is shutting down: no point waiting.
                Err(s) if Refusal::is_closing(&s) => {
                    if let Some(bar) = &bar {
                        bar.abandon();
                    }
                    return Err(Failure::Unreachable(format!(
                        "the coordinator at {} shut down while job {job} was watched; \
                         watch it again once the coordinator is back",
                        op.url
                    )));
                }
                // The coordinator went away (a crash, a network break):
                // watch again.
                Ok(None) | Err(_) => {
                    let wait = backoff.next_delay();
                    let note = format!("lost the coordinator at {}; watching again in {wait:.1?}", op.url);
                    match &bar {
                        Some(bar) => bar.set_message(note),
                        None if lines => say!("{note}"),
                        None => {}
                    }
                    tokio::time::sleep(wait).await;
                    match op.watch(job).await {
                        Ok(s) => stream = s,
                        Err(Failure::Unreachable(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
            },
            _ = tick.tick(), if lines => {
                if let Some(info) = &last {
                    print_line(info, json)?;
                }
            }
        }
    }
    let last = last.expect("the loop ends on a snapshot");
    match bar {
        Some(bar) => {
            bar.finish_and_clear();
            writeln!(io::stdout(), "{}", wrap(&last.line(), text_width(), 2))?;
        }
        None if lines => print_line(&last, json)?,
        None => {}
    }
    Ok(last)
}

fn print_line(info: &JobInfo, json: bool) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    if json {
        json_line(&mut out, info)?;
    } else {
        writeln!(out, "{}", wrap(&info.line(), text_width(), 2))?;
    }
    Ok(out.flush()?)
}

fn new_bar() -> ProgressBar {
    let bar = ProgressBar::new(BAR_LEN);
    bar.set_style(
        // Two lines, so the bar keeps its width on an 80-column terminal
        // and the counts line is cut to the terminal's width, not wrapped:
        // the job's age, then what matters first.
        ProgressStyle::with_template(
            "{spinner} {prefix:>8} [{wide_bar}] {percent:>3}%\n  {wide_msg}",
        )
        .expect("the template is valid")
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn draw(bar: &ProgressBar, j: &JobInfo) {
    bar.set_position((j.progress * BAR_LEN as f64) as u64);
    bar.set_prefix(j.age());
    bar.set_message(format!(
        // What matters first: a narrow terminal cuts the end of the line
        // (a total of N=32 takes 29 columns).
        "{} · ETA {} · total {} · {}/{} tasks · {} · {}{}",
        j.state,
        j.eta(),
        thousands(j.total),
        thousands(j.done.into()),
        thousands(j.tasks.into()),
        j.rate(),
        j.workers_text(),
        j.warnings(),
    ));
}
