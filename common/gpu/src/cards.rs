//! The graphics cards of this machine, each opened as a counting
//! [`Device`].

use crate::jobs::count_in_batches;
use crate::kernel::{Kernel, Launch};
use crate::stream::{Batch, Feed};
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
                .and_then(|listed| {
                    let mut seen = std::collections::BTreeSet::new();
                    match listed.iter().find(|&&i| !seen.insert(i)) {
                        Some(i) => Err(format!("'{s}': card {i} is named twice")),
                        None => Ok(Choice::Listed(listed)),
                    }
                }),
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

/// The `NQUEENS_GPU_*` settings the environment gives, each checked
/// (`None`: the device's default). An unknown word or a number out of
/// range is refused with the values it takes: a mistyped setting never
/// falls back to the default unseen. An empty value counts as unset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    steps: Option<u32>,
    slots: Option<u32>,
    pub(crate) jobs: Option<u32>,
    launches: Option<u32>,
    pub(crate) feeders: Option<u32>,
    /// Whether cards count through CUDA (`NQUEENS_GPU_API=cuda`), not wgpu.
    pub(crate) cuda: Option<bool>,
    /// Threads per block on a CUDA card.
    pub(crate) block: Option<u32>,
    steal: Option<bool>,
    checked: Option<bool>,
    /// Whether threads keep their jobs' table rows in their workgroup's
    /// (block's) memory, on wgpu and CUDA alike.
    rows_in_group: Option<bool>,
    nested: Option<bool>,
    /// Whether a card's threads step on one path, every record of
    /// their stacks in their workgroup's (block's) memory.
    flat: Option<bool>,
}

/// The most searches in flight a setting may ask for (a card's measured
/// width is at most 524,288).
pub const MOST_SLOTS: u32 = 1 << 20;

impl Overrides {
    /// Whether cards count through CUDA (`NQUEENS_GPU_API=cuda`).
    pub fn cuda(&self) -> bool {
        self.cuda == Some(true)
    }

    /// Threads per block on a CUDA card, where given.
    pub fn block(&self) -> Option<u32> {
        self.block
    }

    /// The kernel a CUDA card runs: whether its threads keep their jobs'
    /// pairs in their block's memory (`NQUEENS_GPU_TABLES`) and step
    /// on one path (`NQUEENS_GPU_STEP`); by default, both.
    pub fn cuda_kernel(&self) -> crate::cuda::driver::Kernel {
        let default = crate::cuda::driver::Kernel::DEFAULT;
        crate::cuda::driver::Kernel {
            keep: self.rows_in_group.unwrap_or(default.keep),
            flat: self.flat.unwrap_or(default.flat),
        }
    }

    /// The settings in this process's environment.
    pub fn from_env() -> Result<Overrides, String> {
        Overrides::from_lookup(|name| std::env::var(name).ok())
    }

    /// The settings `lookup` gives:
    /// `NQUEENS_GPU_STEPS`, `NQUEENS_GPU_SLOTS` and `NQUEENS_GPU_JOBS`
    /// set the steps per launch, the searches in flight (measured no
    /// more) and the jobs a batch is cut into (0: as the card's width),
    /// `NQUEENS_GPU_CHECKS` (`on`, `off`) the checks,
    /// `NQUEENS_GPU_TABLES` (`group`, `storage`) where the threads read
    /// their rows' tables (wgpu and CUDA),
    /// `NQUEENS_GPU_STEAL` (`on`, `off`) whether long searches are split,
    /// `NQUEENS_GPU_LOOP` (`nested`, `single`) the form of the shader's
    /// loop (see [`Launch::nested`]),
    /// `NQUEENS_GPU_LAUNCHES` sets the launches a round holds at most,
    /// `NQUEENS_GPU_FEEDERS` the threads feeding a card,
    /// `NQUEENS_GPU_API` (`wgpu`, `cuda`) what cards count through,
    /// `NQUEENS_GPU_BLOCK` a CUDA card's threads per block, and
    /// `NQUEENS_GPU_STEP` (`flat`, `branching`) how a card's threads step.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Overrides, String> {
        let given = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let number = |name: &str, least: u32, most: u32| -> Result<Option<u32>, String> {
            let Some(v) = given(name) else {
                return Ok(None);
            };
            match v.trim().parse::<u32>() {
                Ok(x) if (least..=most).contains(&x) => Ok(Some(x)),
                _ => Err(format!(
                    "{name}={v:?}: give a whole number from {least} to {most}"
                )),
            }
        };
        let word = |name: &str, yes: &str, no: &str| -> Result<Option<bool>, String> {
            match given(name) {
                None => Ok(None),
                Some(v) if v.trim() == yes => Ok(Some(true)),
                Some(v) if v.trim() == no => Ok(Some(false)),
                Some(v) => Err(format!("{name}={v:?}: give {yes} or {no}")),
            }
        };
        Ok(Overrides {
            steps: number("NQUEENS_GPU_STEPS", 1, 65_535)?,
            slots: number("NQUEENS_GPU_SLOTS", 1, MOST_SLOTS)?,
            jobs: number("NQUEENS_GPU_JOBS", 0, 1 << 24)?,
            launches: number("NQUEENS_GPU_LAUNCHES", 1, 64)?,
            feeders: number("NQUEENS_GPU_FEEDERS", 1, 256)?,
            steal: word("NQUEENS_GPU_STEAL", "on", "off")?,
            checked: word("NQUEENS_GPU_CHECKS", "on", "off")?,
            rows_in_group: word("NQUEENS_GPU_TABLES", "group", "storage")?,
            nested: word("NQUEENS_GPU_LOOP", "nested", "single")?,
            cuda: word("NQUEENS_GPU_API", "cuda", "wgpu")?,
            block: number("NQUEENS_GPU_BLOCK", 32, 1024)?,
            flat: word("NQUEENS_GPU_STEP", "flat", "branching")?,
        })
    }
}

impl Tuning {
    /// For an adapter of this type: a hardware GPU runs as many searches
    /// at once as it holds workgroups at once (measured, see
    /// [`crate::width`]) and long launches; a software device (lavapipe,
    /// in CI) a few thousand and short ones; a hardware GPU's shader drops
    /// naga's bounds checks, a software device's keeps them. `given`
    /// overrides each (for tuning on a new card).
    pub fn new(kind: wgpu::DeviceType, given: &Overrides) -> Tuning {
        let software = kind == wgpu::DeviceType::Cpu;
        let most_steps = if software { SOFTWARE_STEPS } else { 65_535 };
        let steps = given.steps.unwrap_or(if software { 2048 } else { 16384 });
        // On an H200, 65,536 searches in flight counted N=19 in 2.5 s,
        // 131,072 in 3.3-3.4 s and 262,144 in 2.9 s: a launch lasts as
        // long as its last wave of workgroups, so a hardware card runs as
        // many as fit one wave, measured (at most 524,288).
        let slots = given.slots.unwrap_or(if software { 2048 } else { 65_536 });
        let fill = !software && given.slots.is_none();
        Tuning {
            launch: Launch {
                steps: steps.clamp(1, most_steps),
                most_steps,
                slots: if fill { 1 << 19 } else { slots },
                fill,
                max_launches: given.launches.unwrap_or(if software { 4 } else { 8 }),
                bias: 0,
                // Sixteen jobs per search at 65,536 searches (a card's
                // measured width may hold more): the batches of several
                // feeding threads (a card's buffers are made once, and
                // zeroed).
                queue_jobs: slots as usize * 16,
                steal: given.steal.unwrap_or(true),
                // Measured on an H200: N=19 and N=20 6-7% faster without.
                checked: given.checked.unwrap_or(software),
                rows_in_group: given.rows_in_group.unwrap_or(!software),
                // Measured on lavapipe: N=17 in 9.4 s nested, 17.5 s not.
                // A card's idle lanes cost it issue slots, where a thread
                // taking its next job alone only waits on memory.
                nested: given.nested.unwrap_or(software),
                // Measured on lavapipe (whose 8 lanes run every way a
                // branch takes, as a warp does): N=16 and N=17 at 0.80 of
                // the branching step's time.
                flat: given.flat.unwrap_or(true),
            },
            // A quarter of a job per search and feeding thread: the queue
            // holds the batches of every feeding thread, and every job
            // costs the host 50-100 ns on a Xeon core (MEASUREMENTS.md).
            // A card's searches are its measured width: known once counting.
            jobs: given
                .jobs
                .unwrap_or(if fill { 0 } else { (slots / 4).max(1) }) as usize,
            // A card's threads spent 38% of their launches' steps
            // searching with 2 feeding threads, 80% with 8 or 16
            // (lavapipe, 2,048 searches in flight, N=16; MEASUREMENTS.md);
            // an H200 counted N=19 in 8.2 s from 4, 3.4 s from 16. A
            // software device runs on the cores the feeders would take.
            feeders: given
                .feeders
                .map_or(if software { default_threads() } else { 16 }, |f| {
                    f as usize
                }),
        }
    }

    /// As [`Tuning::new`] with the settings `lookup` gives (see
    /// [`Overrides::from_lookup`]).
    pub fn from_lookup(
        kind: wgpu::DeviceType,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Tuning, String> {
        Ok(Tuning::new(kind, &Overrides::from_lookup(lookup)?))
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
            ("NQUEENS_GPU_STEP", word(l.flat, "flat", "branching")),
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
    fn open(adapter: &wgpu::Adapter, given: &Overrides) -> Result<Card, String> {
        let info = adapter.get_info();
        let tuning = Tuning::new(info.device_type, given);
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
        count_in_batches(
            interiors,
            froms,
            || self.jobs_per_batch(),
            |tables, jobs, levels| {
                let batch = Batch {
                    tables,
                    jobs,
                    levels,
                };
                self.feed.count(batch, stop)
            },
        )
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
    let given = Overrides::from_env()?;
    let all = adapters();
    let mut opened = Vec::new();
    let mut skipped = Vec::new();
    match choice {
        Choice::Listed(wanted) => {
            for &i in wanted {
                let a = all
                    .get(i)
                    .ok_or_else(|| format!("there is no GPU number {i}: {}", describe(&all)))?;
                opened.push(Card::open(a, &given).map_err(|e| format!("GPU {i}: {e}"))?);
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
                match Card::open(a, &given) {
                    Ok(c) => opened.push(c),
                    Err(e) => skipped.push(format!("{}: {e}", info.name)),
                }
            }
        }
    }
    Ok((opened, skipped))
}

/// Cards opened, and why others were left out.
pub type Opened = (Vec<Arc<dyn Device>>, Vec<String>);

/// The cards `choice` names, opened as devices: through CUDA where
/// `NQUEENS_GPU_API=cuda` (numbered as CUDA numbers them), else through
/// wgpu as [`cards`] opens them.
pub fn devices(choice: &Choice) -> Result<Opened, String> {
    let given = Overrides::from_env()?;
    if given.cuda() {
        let (opened, skipped) = crate::cuda::cards(choice, &given)?;
        let opened = opened.into_iter().map(|c| Arc::new(c) as Arc<dyn Device>);
        return Ok((opened.collect(), skipped));
    }
    let (opened, skipped) = cards(choice)?;
    let opened = opened.into_iter().map(|c| Arc::new(c) as Arc<dyn Device>);
    Ok((opened.collect(), skipped))
}

/// The card `--core gpu` counts on: CUDA's first where
/// `NQUEENS_GPU_API=cuda`, else [`first_card`].
pub fn first_device() -> Result<Arc<dyn Device>, String> {
    let given = Overrides::from_env()?;
    if given.cuda() {
        let (mut opened, _) = crate::cuda::cards(&Choice::Listed(vec![0]), &given)?;
        return Ok(Arc::new(opened.remove(0)));
    }
    Ok(Arc::new(first_card()?))
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
    let given = Overrides::from_env()?;
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
    Card::open(best, &given)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A card is opened once: one named twice is refused, not opened twice.
    #[test]
    fn cards_are_chosen_by_number_each_once() {
        assert_eq!("0,2".parse::<Choice>(), Ok(Choice::Listed(vec![0, 2])));
        assert_eq!("auto".parse::<Choice>(), Ok(Choice::Auto));
        let twice = "0, 1,0".parse::<Choice>().unwrap_err();
        assert!(twice.contains("card 0 is named twice"), "{twice}");
        assert!("0,x".parse::<Choice>().is_err());
    }

    /// The environment a tuning names gives that tuning back, for a card
    /// and a software device, every knob turned from its default.
    #[test]
    fn a_tunings_environment_gives_it_back() {
        for kind in [wgpu::DeviceType::DiscreteGpu, wgpu::DeviceType::Cpu] {
            let mut t = Tuning::new(kind, &Overrides::default());
            let l = &mut t.launch;
            l.steps /= 2;
            l.max_launches *= 2;
            (l.rows_in_group, l.checked, l.steal) = (!l.rows_in_group, !l.checked, false);
            (l.nested, l.flat) = (!l.nested, !l.flat);
            (t.feeders, t.jobs) = (t.feeders + 3, t.jobs * 4 + 100);
            let env = t.env();
            let lookup = |name: &str| env.iter().find(|e| e.0 == name).map(|e| e.1.clone());
            assert_eq!(
                Tuning::from_lookup(kind, lookup),
                Ok(t),
                "{kind:?}: {env:?}"
            );
            assert_eq!(
                t.launch.fill,
                !env.iter().any(|e| e.0 == "NQUEENS_GPU_SLOTS"),
                "a card's width is measured unless the searches are given"
            );
        }
        // A card's jobs per batch follow its measured width unless given.
        let t = Tuning::new(wgpu::DeviceType::DiscreteGpu, &Overrides::default());
        assert_eq!(t.jobs, 0);
        assert!(t.env().iter().all(|e| e.0 != "NQUEENS_GPU_JOBS"));
    }

    /// However many steps the environment asks for, a software device's
    /// launches stay within what its loops count exactly.
    #[test]
    fn a_software_device_takes_no_more_steps_than_its_loops_count() {
        let asking = |kind| {
            let lookup = |name: &str| (name == "NQUEENS_GPU_STEPS").then(|| "65535".to_string());
            Tuning::from_lookup(kind, lookup).unwrap().launch.steps
        };
        assert_eq!(asking(wgpu::DeviceType::Cpu), SOFTWARE_STEPS);
        assert_eq!(asking(wgpu::DeviceType::DiscreteGpu), 65_535);
    }

    /// A mistyped or out-of-range setting is refused, naming the setting,
    /// what it was given and what it takes; an empty one is unset.
    #[test]
    fn a_setting_the_card_cannot_take_is_refused_with_what_it_takes() {
        let with = |name: &'static str, value: &'static str| {
            Overrides::from_lookup(move |n| (n == name).then(|| value.to_string()))
        };
        let refused = [
            ("NQUEENS_GPU_LOOP", "singel", "give nested or single"),
            ("NQUEENS_GPU_LOOP", "Single", "give nested or single"),
            ("NQUEENS_GPU_TABLES", "shared", "give group or storage"),
            ("NQUEENS_GPU_CHECKS", "no", "give on or off"),
            ("NQUEENS_GPU_STEAL", "0", "give on or off"),
            ("NQUEENS_GPU_STEPS", "16k", "from 1 to 65535"),
            ("NQUEENS_GPU_STEPS", "0", "from 1 to 65535"),
            ("NQUEENS_GPU_STEPS", "65536", "from 1 to 65535"),
            ("NQUEENS_GPU_SLOTS", "-1", "from 1 to 1048576"),
            ("NQUEENS_GPU_SLOTS", "1048577", "from 1 to 1048576"),
            ("NQUEENS_GPU_JOBS", "99999999999", "from 0 to 16777216"),
            ("NQUEENS_GPU_LAUNCHES", "0", "from 1 to 64"),
            ("NQUEENS_GPU_FEEDERS", "257", "from 1 to 256"),
            ("NQUEENS_GPU_API", "vulkan", "give cuda or wgpu"),
            ("NQUEENS_GPU_BLOCK", "16", "from 32 to 1024"),
            ("NQUEENS_GPU_STEP", "branchless", "give flat or branching"),
        ];
        for (name, value, advice) in refused {
            let e = with(name, value).expect_err(value);
            assert!(
                e.starts_with(&format!("{name}=\"{value}\": ")) && e.ends_with(advice),
                "{e}"
            );
        }
        let kind = wgpu::DeviceType::DiscreteGpu;
        let default = Tuning::new(kind, &Overrides::default());
        for (name, _, _) in refused {
            assert_eq!(with(name, " "), Ok(Overrides::default()), "{name}");
        }
        // The bounds themselves are taken, and words with spaces around.
        let nested = Tuning::new(kind, &with("NQUEENS_GPU_LOOP", " nested ").unwrap());
        assert!(!default.launch.nested && nested.launch.nested);
        let most = with("NQUEENS_GPU_SLOTS", "1048576").unwrap();
        assert_eq!(Tuning::new(kind, &most).launch.slots, MOST_SLOTS);
        assert_eq!(with("NQUEENS_GPU_STEPS", "1").unwrap().steps, Some(1));
    }
}
