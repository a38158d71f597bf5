//! The graphics cards a command counts on: `--core gpu` (the best card
//! here) and a worker's `--gpus`.

use crate::exit::Failure;
use crate::opts::{Mode as ModeArg, PlanShape};
use nqueens_common::engine::device::Device;
use nqueens_common::engine::lanes::Path;
use nqueens_common::plan::Strategy;
use nqueens_common::Size;
use nqueens_gpu::{devices, first_device, Choice};
use std::sync::Arc;

/// The card `--core gpu` asks for (`None` for any other core): the best
/// this machine has, or bad input naming what was found.
pub fn forced(core: Option<Path>) -> Result<Option<Arc<dyn Device>>, Failure> {
    if core != Some(Path::Gpu) {
        return Ok(None);
    }
    let card = first_device().map_err(|e| Failure::BadInput(format!("--core gpu: {e}")))?;
    Ok(Some(card))
}

/// A worker's cards: those `--gpus` names (`auto`: every hardware GPU).
/// With `--core gpu` and `--gpus auto` on a machine with no hardware GPU,
/// the best device there is (a software one, as in CI). A card `--gpus`
/// lists that cannot be opened is bad input; one that `auto` finds and
/// cannot open is left out with a warning.
pub fn for_worker(core: Option<Path>, gpus: &Choice) -> Result<Vec<Arc<dyn Device>>, Failure> {
    let on_cards = core == Some(Path::Gpu);
    if on_cards && *gpus == Choice::None {
        return Err(Failure::BadInput(
            "--core gpu counts on graphics cards, and --gpus none leaves none: drop one".into(),
        ));
    }
    let (opened, skipped) = devices(gpus).map_err(|e| Failure::BadInput(format!("--gpus: {e}")))?;
    for why in skipped {
        say!("warning: GPU left out: {why}");
    }
    if on_cards && opened.is_empty() {
        return Ok(forced(core)?.into_iter().collect());
    }
    Ok(opened)
}

/// The strategy and shape a count takes: with a card (`gpu`), always a
/// plan (the default strategy of N, if none was asked for) counted by
/// backtracking, since the join counts on the CPU alone.
pub fn backtracking(
    n: Size,
    strategy: Option<Strategy>,
    shape: PlanShape,
    gpu: bool,
) -> Result<(Option<Strategy>, PlanShape), Failure> {
    if !gpu {
        return Ok((strategy, shape));
    }
    if shape.mode == Some(ModeArg::Join) || strategy == Some(Strategy::Halves) {
        return Err(Failure::BadInput(
            "--core gpu counts by backtracking; the join (--mode join, the halves strategy) \
             counts on the CPU: leave out --core gpu or the join"
                .into(),
        ));
    }
    let shape = PlanShape {
        mode: Some(ModeArg::Backtrack),
        ..shape
    };
    let strategy = shape.strategy(n, strategy);
    Ok((Some(strategy), shape))
}
