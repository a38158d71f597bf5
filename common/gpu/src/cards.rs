//! The graphics cards of this machine, each opened as a counting
//! [`Device`].

use crate::jobs::Prepared;
use crate::kernel::{Kernel, Launch};
use crate::stream::{Batch, Feed, MOST_INTERIORS};
use nqueens_common::engine::counts::PieceCounts;
use nqueens_common::engine::device::{Busy, Device, DeviceError};
use nqueens_common::engine::interior::{Interior, Start};
use nqueens_common::engine::threads::default_threads;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Which adapters to open (a worker's `--gpus`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Every hardware GPU (a software device such as lavapipe is slower
    /// than the CPU it runs on, so it is left out).
    Auto,
    /// None: count on the CPU only.
    None,
    /// These adapters by their index in [`adapters`], software ones too.
    Listed(Vec<usize>),
}

impl std::str::FromStr for Choice {
    type Err = String;
    fn from_str(s: &str) -> Result<Choice, String> {
        match s {
            "auto" => Ok(Choice::Auto),
            "none" => Ok(Choice::None),
            _ => s
                .split(',')
                .map(|i| {
                    i.trim().parse::<usize>().map_err(|_| {
                        format!("'{s}': give auto, none, or card numbers such as 0 or 0,1")
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Choice::Listed),
        }
    }
}

/// The most steps per launch on a software device. Lavapipe ends a
/// shader's loops silently once they have run 65,535 iterations in all
/// (every loop of an invocation together, an iteration counted once for
/// the 8 lanes that run it together): with a shader whose steps also
/// backed up in a loop of their own, N=14 came out wrong at 12,000 steps
/// and right at 8,192. A lane runs its outer loop at most once a job it
/// takes (each costs a step) or a stretch of steps, and once more, its
/// stepping loop once a step, and restoring and saving its stack once a
/// row (30 at most): 2 × steps + 61 at most, in either form of the loop.
/// Even with its 8 lanes never running together, 2,048 steps make 33,256
/// iterations at most (4,096 could pass the limit). Copying the rows'
/// tables to workgroup memory, not a software device's default, adds one
/// a row for every job taken: exact on lavapipe in the suite, not by this
/// bound.
/// N=16 takes as long at 2,048 steps as at 4,096.
pub const SOFTWARE_STEPS: u32 = 2048;

/// How a card's counts are cut and launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    pub launch: Launch,
    /// Jobs to cut a batch into, at least, where its interiors allow; 0:
    /// a quarter of the searches the card runs at once (see
    /// [`Card::jobs_per_batch`]).
    pub jobs: usize,
    /// Threads that feed the card at once (see [`Device::feeders`]).
    pub feeders: usize,
}

impl Tuning {
    /// For an adapter of this type: a hardware GPU runs as many searches
    /// at once as it holds workgroups at once (measured, see
    /// [`crate::width`]) and long launches; a software device (lavapipe,
    /// in CI) a few thousand and short ones; a hardware GPU's shader drops
    /// naga's bounds checks, a software device's keeps them. The
    /// environment overrides each (for tuning on a new card; see
    /// [`Tuning::from_lookup`]).
    pub fn for_type(kind: wgpu::DeviceType) -> Tuning {
        Tuning::from_lookup(kind, |name| std::env::var(name).ok())
    }

    /// As [`Tuning::for_type`], with `lookup` for the environment:
    /// `NQUEENS_GPU_STEPS`, `NQUEENS_GPU_SLOTS` and `NQUEENS_GPU_JOBS`
    /// set the steps per launch, the searches in flight (measured no
    /// more) and the jobs a batch is cut into,
    /// `NQUEENS_GPU_CHECKS` (`on`, `off`) the checks,
    /// `NQUEENS_GPU_TABLES` (`group`, `storage`) where the threads read
    /// their rows' tables,
    /// `NQUEENS_GPU_STEAL=off` leaves long searches unsplit,
    /// `NQUEENS_GPU_LOOP` (`nested`, `single`) the form of the shader's
    /// loop (see [`Launch::nested`]),
    /// `NQUEENS_GPU_LAUNCHES` sets the launches a round holds at most and
    /// `NQUEENS_GPU_FEEDERS` the threads feeding a card.
    pub fn from_lookup(kind: wgpu::DeviceType, lookup: impl Fn(&str) -> Option<String>) -> Tuning {
        let software = kind == wgpu::DeviceType::Cpu;
        let number =
            |name: &str, default: u32| lookup(name).and_then(|v| v.parse().ok()).unwrap_or(default);
        let unless =
            |name: &str, no: &str, default: bool| lookup(name).map_or(default, |v| v != no);
        let most_steps = if software { SOFTWARE_STEPS } else { 65_535 };
        let steps = number("NQUEENS_GPU_STEPS", if software { 2048 } else { 16384 });
        // On an H200, 65,536 searches in flight counted N=19 in 2.5 s,
        // 131,072 in 3.3-3.4 s and 262,144 in 2.9 s: a launch lasts as
        // long as its last wave of workgroups, so a hardware card runs as
        // many as fit one wave, measured (at most 524,288).
        let given = lookup("NQUEENS_GPU_SLOTS").is_some();
        let slots = number("NQUEENS_GPU_SLOTS", if software { 2048 } else { 65_536 });
        let fill = !software && !given;
        Tuning {
            launch: Launch {
                steps: steps.clamp(1, most_steps),
                most_steps,
                slots: if fill { 1 << 19 } else { slots.max(1) },
                fill,
                max_launches: number("NQUEENS_GPU_LAUNCHES", if software { 4 } else { 8 }),
                bias: 0,
                // Sixteen jobs per search at 65,536 searches (a card's
                // measured width may hold more): the batches of several
                // feeding threads (a card's buffers are made once, and
                // zeroed).
                queue_jobs: slots as usize * 16,
                steal: unless("NQUEENS_GPU_STEAL", "off", true),
                // Measured on an H200: N=19 and N=20 6-7% faster without.
                checked: unless("NQUEENS_GPU_CHECKS", "off", software),
                rows_in_group: unless("NQUEENS_GPU_TABLES", "storage", !software),
                // Measured on lavapipe: N=17 in 9.4 s nested, 17.5 s not.
                // A card's idle lanes cost it issue slots, where a thread
                // taking its next job alone only waits on memory.
                nested: unless("NQUEENS_GPU_LOOP", "single", software),
            },
            // A quarter of a job per search and feeding thread: the queue
            // holds the batches of every feeding thread, and every job
            // costs the host 50-100 ns on a Xeon core (MEASUREMENTS.md).
            // A card's searches are its measured width: known once counting.
            jobs: number(
                "NQUEENS_GPU_JOBS",
                if fill { 0 } else { (slots / 4).max(1) },
            ) as usize,
            // A card's threads spent 38% of their launches' steps
            // searching with 2 feeding threads, 80% with 8 or 16
            // (lavapipe, 2,048 searches in flight, N=16; MEASUREMENTS.md);
            // an H200 counted N=19 in 8.2 s from 4, 3.4 s from 16. A
            // software device runs on the cores the feeders would take.
            feeders: number(
                "NQUEENS_GPU_FEEDERS",
                if software {
                    default_threads() as u32
                } else {
                    16
                },
            )
            .max(1) as usize,
        }
    }

    /// The environment that gives this tuning on a card (the knobs
    /// [`Tuning::from_lookup`] reads; the searches in flight only where
    /// they are not the card's measured width).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let l = &self.launch;
        let word = |yes: bool, y: &str, n: &str| if yes { y } else { n }.to_string();
        let mut out = vec![
            ("NQUEENS_GPU_STEPS", l.steps.to_string()),
            (
                "NQUEENS_GPU_TABLES",
                word(l.rows_in_group, "group", "storage"),
            ),
            ("NQUEENS_GPU_FEEDERS", self.feeders.to_string()),
            ("NQUEENS_GPU_LAUNCHES", l.max_launches.to_string()),
            ("NQUEENS_GPU_CHECKS", word(l.checked, "on", "off")),
            ("NQUEENS_GPU_LOOP", word(l.nested, "nested", "single")),
            ("NQUEENS_GPU_STEAL", word(l.steal, "on", "off")),
        ];
        if self.jobs > 0 {
            out.push(("NQUEENS_GPU_JOBS", self.jobs.to_string()));
        }
        if !l.fill {
            out.push(("NQUEENS_GPU_SLOTS", l.slots.to_string()));
        }
        out
    }
}

/// One opened card.
pub struct Card {
    name: String,
    tuning: Tuning,
    kernel: Arc<Kernel>,
    feed: Feed,
}

impl std::fmt::Debug for Card {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Card")
            .field("name", &self.name)
            .field("tuning", &self.tuning)
            .finish()
    }
}

impl Card {
    fn open(adapter: &wgpu::Adapter) -> Result<Card, String> {
        let info = adapter.get_info();
        let tuning = Tuning::for_type(info.device_type);
        let kernel = Arc::new(Kernel::open(adapter)?);
        Ok(Card {
            name: format!("gpu:{} ({})", info.name, info.backend.to_str()),
            tuning,
            feed: Feed::start(Arc::clone(&kernel), tuning.launch),
            kernel,
        })
    }

    /// This card with other tuning (`bench --tune`; tests: short
    /// launches, biased counters): the same device and shaders, a queue
    /// of its own.
    pub fn tuned(&self, tuning: Tuning) -> Card {
        Card {
            name: self.name.clone(),
            tuning,
            kernel: Arc::clone(&self.kernel),
            feed: Feed::start(Arc::clone(&self.kernel), tuning.launch),
        }
    }

    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// Jobs a batch is cut into, at least: as tuned, or a quarter of the
    /// searches the card runs at once (16,384 before its first count).
    pub fn jobs_per_batch(&self) -> usize {
        match self.tuning.jobs {
            0 => match self.kernel.busy().searches {
                0 => 16_384,
                s => (s as usize / 4).max(1),
            },
            jobs => jobs,
        }
    }

    /// Jobs split off long searches since the card was opened (see
    /// [`crate::steal`]).
    pub fn jobs_split(&self) -> u64 {
        self.kernel.jobs_split()
    }

    /// Launches of the shader since the card was opened.
    pub fn launches(&self) -> u64 {
        self.kernel.launches()
    }
}

impl Device for Card {
    fn name(&self) -> &str {
        &self.name
    }

    fn count_below(
        &self,
        interiors: &[Interior],
        froms: &[Start],
        stop: &AtomicBool,
    ) -> Result<Option<Vec<PieceCounts>>, DeviceError> {
        let mut out = Vec::with_capacity(interiors.len());
        let chunks = interiors
            .chunks(MOST_INTERIORS)
            .zip(froms.chunks(MOST_INTERIORS));
        for (interiors, froms) in chunks {
            let p = Prepared::new(interiors, froms, self.jobs_per_batch());
            let batch = Batch {
                tables: p.tables,
                jobs: p.jobs,
                levels: p.levels,
            };
            let Some(counted) = self.feed.count(batch, stop)? else {
                return Ok(None);
            };
            for (mut c, (sols, nodes)) in p.host.into_iter().zip(counted) {
                c.c1 = c.c1.checked_add(sols).ok_or(DeviceError::Overflow)?;
                c.nodes = c.nodes.checked_add(nodes).ok_or(DeviceError::Overflow)?;
                out.push(c);
            }
        }
        Ok(Some(out))
    }

    fn feeders(&self) -> usize {
        self.tuning.feeders
    }

    fn busy(&self) -> Option<Busy> {
        Some(self.kernel.busy())
    }
}

/// Every adapter wgpu finds on this machine (Vulkan, Metal, DX12), in a
/// stable order: the numbers `--gpus` takes.
pub fn adapters() -> Vec<wgpu::Adapter> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let mut all = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    all.sort_by_key(|a| {
        let i = a.get_info();
        (
            i.backend as u32,
            i.vendor,
            i.device,
            i.device_pci_bus_id,
            i.name,
        )
    });
    all
}

/// The cards `choice` names, opened. An adapter that fails to open is an
/// error when it was listed, and left out (with its reason in the second
/// list) under [`Choice::Auto`].
pub fn cards(choice: &Choice) -> Result<(Vec<Card>, Vec<String>), String> {
    if *choice == Choice::None {
        return Ok((Vec::new(), Vec::new()));
    }
    let all = adapters();
    let mut opened = Vec::new();
    let mut skipped = Vec::new();
    match choice {
        Choice::Listed(wanted) => {
            for &i in wanted {
                let a = all
                    .get(i)
                    .ok_or_else(|| format!("there is no GPU number {i}: {}", describe(&all)))?;
                opened.push(Card::open(a).map_err(|e| format!("GPU {i}: {e}"))?);
            }
        }
        _ => {
            let mut seen = std::collections::HashSet::new();
            for a in &all {
                let info = a.get_info();
                // One card may show through two APIs (Vulkan and DX12 on
                // Windows): it is opened once, through the first.
                let card = (info.vendor, info.device, info.name.clone());
                if info.device_type == wgpu::DeviceType::Cpu || !seen.insert(card) {
                    continue;
                }
                match Card::open(a) {
                    Ok(c) => opened.push(c),
                    Err(e) => skipped.push(format!("{}: {e}", info.name)),
                }
            }
        }
    }
    Ok((opened, skipped))
}

/// The adapters, numbered, for a message: "0: llvmpipe (vulkan, software)".
pub fn describe(all: &[wgpu::Adapter]) -> String {
    if all.is_empty() {
        return "this machine has no Vulkan, Metal or DX12 device (is the Vulkan loader \
                and a driver installed?)"
            .into();
    }
    let names: Vec<String> = all
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let info = a.get_info();
            let kind = if info.device_type == wgpu::DeviceType::Cpu {
                ", software"
            } else {
                ""
            };
            format!("{i}: {} ({}{kind})", info.name, info.backend.to_str())
        })
        .collect();
    format!("devices here: {}", names.join("; "))
}

/// The best card here for `--core gpu`: a discrete GPU, else an
/// integrated, virtual or other one, else a software device (lavapipe:
/// slow, but the same kernel, which is how CI runs it).
pub fn first_card() -> Result<Card, String> {
    let all = adapters();
    let rank = |a: &wgpu::Adapter| match a.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    };
    let best = all
        .iter()
        .min_by_key(|a| rank(a))
        .ok_or_else(|| describe(&all))?;
    Card::open(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The environment a tuning names gives that tuning back, for a card
    /// and a software device, every knob turned from its default.
    #[test]
    fn a_tunings_environment_gives_it_back() {
        for kind in [wgpu::DeviceType::DiscreteGpu, wgpu::DeviceType::Cpu] {
            let mut t = Tuning::from_lookup(kind, |_| None);
            let l = &mut t.launch;
            l.steps /= 2;
            l.max_launches *= 2;
            (l.rows_in_group, l.checked, l.steal) = (!l.rows_in_group, !l.checked, false);
            l.nested = !l.nested;
            (t.feeders, t.jobs) = (t.feeders + 3, t.jobs * 4 + 100);
            let env = t.env();
            let lookup = |name: &str| env.iter().find(|e| e.0 == name).map(|e| e.1.clone());
            assert_eq!(Tuning::from_lookup(kind, lookup), t, "{kind:?}: {env:?}");
            assert_eq!(
                t.launch.fill,
                !env.iter().any(|e| e.0 == "NQUEENS_GPU_SLOTS"),
                "a card's width is measured unless the searches are given"
            );
        }
        // A card's jobs per batch follow its measured width unless given.
        let t = Tuning::from_lookup(wgpu::DeviceType::DiscreteGpu, |_| None);
        assert_eq!(t.jobs, 0);
        assert!(t.env().iter().all(|e| e.0 != "NQUEENS_GPU_JOBS"));
    }

    /// However many steps the environment asks for, a software device's
    /// launches stay within what its loops count exactly.
    #[test]
    fn a_software_device_takes_no_more_steps_than_its_loops_count() {
        let asking = |kind| {
            let lookup = |name: &str| (name == "NQUEENS_GPU_STEPS").then(|| "65535".to_string());
            Tuning::from_lookup(kind, lookup).launch.steps
        };
        assert_eq!(asking(wgpu::DeviceType::Cpu), SOFTWARE_STEPS);
        assert_eq!(asking(wgpu::DeviceType::DiscreteGpu), 65_535);
    }
}
