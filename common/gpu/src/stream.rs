//! One card's queue of jobs, kept topped up from every feeding thread.
//!
//! A card is fastest when every one of its threads always has a search:
//! a launch lasts as long as its busiest thread, and a thread without a
//! job idles. So the card keeps one queue for the whole of its life, and
//! one driver thread feeds it:
//!
//! - A feeding thread hands in a batch (its interiors' tables and their
//!   jobs) and waits for its interiors' counts. The driver puts the
//!   batch's tables in a ring of interiors and its jobs in a ring of jobs
//!   on the card, behind the jobs already waiting, as room frees.
//! - The card's threads take jobs from the ring as they finish others,
//!   whatever batch they come from, so a long search holds only its own
//!   thread, never the card. Counts go straight to the job's interior,
//!   and a finished job to its batch's count of jobs done.
//! - The driver keeps two *rounds* (a few launches, then a copy of the
//!   queue's counters and of the open batches' counts) in flight: while
//!   the card runs one, the host reads the other back, answers the
//!   batches it finds done, and puts new jobs in.
//! - When the queue is empty and half the threads idle (the end of a
//!   count), the driver lets the rounds finish and splits the searches
//!   still going among the idle threads ([`crate::steal`]).
//!
//! A batch whose stacks need more rows than the card's shader holds
//! waits until the queue empties, and the shader is built again for it.

use crate::jobs::TABLE_WORDS;
use crate::kernel::{as_bytes, Kernel, Launch, Readback};
use crate::steal::{steal, NONE, RECORD_WORDS, SLOT_WORDS};
use nqueens_common::engine::device::DeviceError;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// How often a waiting feeding thread looks at its stop flag.
const STOP_LOOK: Duration = Duration::from_millis(20);

/// Interiors the card holds at once; a batch has at most
/// [`MOST_INTERIORS`].
const INTERIOR_RING: u64 = 1 << 13;

/// Interiors one batch holds at most.
pub const MOST_INTERIORS: usize = 2048;

/// Batches open at once, at most.
const TAGS: u32 = 1024;

// A slot names its job's interior and batch in one word, 16 bits each.
const _: () = assert!(INTERIOR_RING <= 1 << 16 && TAGS <= 1 << 16);

/// Words of one interior's counts on the card: completions and queens
/// placed, each a low and a high word.
const COUNT_WORDS: u64 = 4;

/// Words of the queue's counters on the card (see count.wgsl's `control`).
const CONTROL_WORDS: u64 = 8;

/// Rounds in flight at most.
const ROUNDS: usize = 2;

/// What a card counts: interiors' tables ([`TABLE_WORDS`] words each)
/// and their jobs, as [`crate::jobs::Prepared`] lays them out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub tables: Vec<u32>,
    pub jobs: Vec<[u32; 8]>,
    /// Rows a thread's stack must hold.
    pub levels: u32,
}

impl Batch {
    fn interiors(&self) -> usize {
        self.tables.len() / TABLE_WORDS
    }
}

/// Per interior of a batch: completions and queens placed on the card.
pub type InteriorCounts = Vec<(u64, u64)>;

type Answer = Result<InteriorCounts, DeviceError>;

/// A batch handed in, and where its answer goes.
struct Request {
    batch: Batch,
    reply: mpsc::Sender<Answer>,
    given_up: Arc<AtomicBool>,
}

/// The way in to a card's driver thread. Dropping it ends the thread and
/// waits for it: the rounds on the card are read back, nothing more is
/// launched, and the batches not answered get an error. (A process that
/// exits while its driver thread is inside the device's driver can crash
/// in the driver's exit handlers.)
pub struct Feed {
    tx: Option<mpsc::Sender<Request>>,
    closing: Arc<AtomicBool>,
    driver: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::Relaxed);
        drop(self.tx.take());
        if let Some(driver) = self.driver.take() {
            // A driver that panicked has nothing left to wait for.
            drop(driver.join());
        }
    }
}

impl Feed {
    /// Starts the driver of `kernel`'s card, launching as `launch` says.
    pub fn start(kernel: Arc<Kernel>, launch: Launch) -> Feed {
        let (tx, rx) = mpsc::channel();
        let closing = Arc::new(AtomicBool::new(false));
        let driver = Driver {
            kernel,
            launch,
            rx,
            closing: Arc::clone(&closing),
            pending: VecDeque::new(),
            stream: None,
        };
        let driver = std::thread::Builder::new()
            .name("gpu-feed".into())
            .spawn(move || driver.run())
            .expect("a thread for the card's feed");
        Feed {
            tx: Some(tx),
            closing,
            driver: Some(driver),
        }
    }

    /// Counts `batch` on the card: per interior, completions and queens
    /// placed. `None` once `stop` is set (looked at every few
    /// milliseconds while waiting); the card then drops the batch's jobs
    /// not yet started.
    pub fn count(
        &self,
        batch: Batch,
        stop: &AtomicBool,
    ) -> Result<Option<InteriorCounts>, DeviceError> {
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if batch.jobs.is_empty() {
            return Ok(Some(vec![(0, 0); batch.interiors()]));
        }
        let (reply, answer) = mpsc::channel();
        let given_up = Arc::new(AtomicBool::new(false));
        let gone = || DeviceError::Failed("the card's feed has stopped".into());
        let request = Request {
            batch,
            reply,
            given_up: Arc::clone(&given_up),
        };
        let tx = self.tx.as_ref().ok_or_else(gone)?;
        tx.send(request).map_err(|_| gone())?;
        loop {
            match answer.recv_timeout(STOP_LOOK) {
                Ok(counted) => return counted.map(Some),
                Err(mpsc::RecvTimeoutError::Timeout) if stop.load(Ordering::Relaxed) => {
                    given_up.store(true, Ordering::Relaxed);
                    return Ok(None);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err(gone()),
            }
        }
    }
}

/// The driver thread's state: batches not yet on the card, and the card's
/// queue with what is on it.
struct Driver {
    kernel: Arc<Kernel>,
    launch: Launch,
    rx: mpsc::Receiver<Request>,
    /// Set when the feed is dropped: read back the rounds on the card and
    /// end.
    closing: Arc<AtomicBool>,
    pending: VecDeque<Request>,
    stream: Option<Stream>,
}

impl Driver {
    fn run(mut self) {
        loop {
            if self.closing.load(Ordering::Relaxed) {
                self.close();
                return;
            }
            if self.idle() {
                match self.rx.recv() {
                    Ok(r) => self.pending.push_back(r),
                    Err(_) => return,
                }
            }
            while let Ok(r) = self.rx.try_recv() {
                self.pending.push_back(r);
            }
            let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.step()));
            let failed = match stepped {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(_) => DeviceError::Failed("the card's feed panicked".into()),
            };
            self.fail_all(failed);
        }
    }

    /// Reads back the rounds on the card (nothing runs there after) and
    /// fails the batches not answered.
    fn close(&mut self) {
        if let Some(s) = self.stream.as_mut() {
            while !s.rounds.is_empty() {
                if s.finish_round(&self.kernel, &self.launch).is_err() {
                    break;
                }
            }
        }
        self.fail_all(DeviceError::Failed("the card's feed has stopped".into()));
    }

    /// Nothing waits and nothing is on the card.
    fn idle(&self) -> bool {
        self.pending.is_empty() && self.stream.as_ref().is_none_or(Stream::is_empty)
    }

    /// Puts in what fits, submits a round, and reads the oldest round back
    /// once two are in flight (or once nothing more is to be submitted).
    fn step(&mut self) -> Result<(), DeviceError> {
        self.open_batches()?;
        let Some(s) = self.stream.as_mut() else {
            return Ok(());
        };
        s.drop_given_up();
        s.put_jobs(&self.kernel);
        let submitted = s.submit_round(&self.kernel, &self.launch);
        if s.rounds.len() >= ROUNDS || (!submitted && !s.rounds.is_empty()) {
            s.finish_round(&self.kernel, &self.launch)?;
        }
        if self.launch.steal && s.tail() {
            while !s.rounds.is_empty() {
                s.finish_round(&self.kernel, &self.launch)?;
            }
            if s.tail() {
                s.split(&self.kernel)?;
            }
        }
        Ok(())
    }

    /// Opens the batches waiting, in order, while their tables fit (a
    /// batch needing a deeper stack than the shader's waits for an empty
    /// queue, and the shader is built again).
    fn open_batches(&mut self) -> Result<(), DeviceError> {
        while let Some(r) = self.pending.front() {
            if r.given_up.load(Ordering::Relaxed) {
                self.pending.pop_front();
                continue;
            }
            let levels = r.batch.levels;
            if r.batch.interiors() > MOST_INTERIORS {
                let r = self.pending.pop_front().expect("looked at");
                let many = format!("a batch of {} interiors", r.batch.interiors());
                drop(r.reply.send(Err(DeviceError::Failed(many))));
                continue;
            }
            let deeper = self.stream.as_ref().is_none_or(|s| s.levels < levels);
            if deeper {
                if !self.stream.as_ref().is_none_or(Stream::is_empty) {
                    return Ok(());
                }
                let old = self.stream.take().map_or(0, |s| s.levels);
                match Stream::new(&self.kernel, &self.launch, levels.max(old)) {
                    Ok(s) => self.stream = Some(s),
                    Err(e) => {
                        let r = self.pending.pop_front().expect("looked at");
                        drop(r.reply.send(Err(e)));
                        continue;
                    }
                }
            }
            let s = self.stream.as_mut().expect("built above");
            if !s.has_room_for(&self.pending[0].batch) {
                return Ok(());
            }
            let r = self.pending.pop_front().expect("looked at");
            s.open(&self.kernel, &self.launch, r);
        }
        Ok(())
    }

    /// Answers every batch handed in with `e`, and drops the queue (the
    /// next batch starts a new one).
    fn fail_all(&mut self, e: DeviceError) {
        for r in self.pending.drain(..) {
            drop(r.reply.send(Err(e.clone())));
        }
        if let Some(s) = self.stream.take() {
            for o in s.open.into_iter().flatten() {
                drop(o.reply.send(Err(e.clone())));
            }
        }
    }
}

/// A batch on the card.
struct Open {
    reply: mpsc::Sender<Answer>,
    given_up: Arc<AtomicBool>,
    /// Its first interior's number (counting every interior ever opened;
    /// its place in the ring is this modulo the ring's size).
    first: u64,
    interiors: u64,
    /// Its jobs, and how many are in the queue (or done) so far.
    jobs: Vec<[u32; 8]>,
    put: usize,
    /// Jobs in the queue so far, split ones included, and jobs done (as
    /// last read).
    queued: u32,
    done: u32,
    /// Per interior, the queens the host placed to start split jobs.
    placed: Vec<u64>,
    /// The first round that counts its jobs done: a round submitted
    /// earlier read its tag's counter for the batch that had it before.
    from_round: u64,
}

impl Open {
    /// Every job of it is done (none still to be put in).
    fn finished(&self) -> bool {
        (self.put == self.jobs.len() || self.given_up.load(Ordering::Relaxed))
            && self.done == self.queued
    }
}

/// A round in flight: its submission, the words it copies back, and the
/// batches whose counts it copies (each by its tag, first interior and
/// interiors).
struct Round {
    number: u64,
    /// The slots it let take jobs.
    active: u32,
    index: wgpu::SubmissionIndex,
    back: Readback,
    reads: Vec<(u32, u64, u64)>,
}

/// The card's queue, its buffers, and the batches on it.
struct Stream {
    levels: u32,
    groups: u32,
    slots: u32,
    pipeline: wgpu::ComputePipeline,
    bind: wgpu::BindGroup,
    params: wgpu::Buffer,
    tables: wgpu::Buffer,
    jobs: wgpu::Buffer,
    slot_buf: wgpu::Buffer,
    stacks: wgpu::Buffer,
    results: wgpu::Buffer,
    control: wgpu::Buffer,
    done: wgpu::Buffer,
    /// Jobs the ring holds (a power of two).
    ring: u32,
    /// Jobs put in and taken (as last read), wrapping as on the card.
    end: u32,
    head: u32,
    /// Interiors opened so far, and the host's copy of the tables ring.
    next_interior: u64,
    mirror: Vec<u32>,
    /// Open batches by tag, the tags in the order opened, and free tags.
    open: Vec<Option<Open>>,
    order: VecDeque<u32>,
    free: Vec<u32>,
    rounds: VecDeque<Round>,
    /// Rounds submitted so far.
    submitted: u64,
    /// Slots that may hold a search (plus one at most): launches reach
    /// this far at least.
    reach: u32,
    /// Threads per workgroup.
    wg: u32,
    /// Launches in the next round.
    launches: u32,
    /// Jobs unfinished when a split last found nothing to take.
    fruitless: Option<u32>,
}

impl Stream {
    fn new(kernel: &Kernel, launch: &Launch, levels: u32) -> Result<Stream, DeviceError> {
        let limits = &kernel.limits;
        let fit = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size)
            / 32;
        let most = (launch.queue_jobs as u64).min(fit).clamp(1, 1 << 31);
        let ring = 1u32 << (63 - most.leading_zeros());
        let (wg, pipeline) = kernel.prepare(levels, ring, launch)?;
        let most = launch
            .slots
            .div_ceil(wg)
            .min(limits.max_compute_workgroups_per_dimension)
            .max(1);
        let groups = if launch.fill {
            kernel.width(levels, ring, launch, most)?
        } else {
            most
        };
        let slots = groups * wg;
        kernel.searches.store(slots.into(), Ordering::Relaxed);
        let buffer = |label, bytes, usage| kernel.buffer(label, bytes, usage);
        use wgpu::BufferUsages as U;
        let rw = U::STORAGE | U::COPY_DST | U::COPY_SRC;
        let params = buffer("params", 16, U::UNIFORM | U::COPY_DST);
        kernel
            .queue
            .write_buffer(&params, 0, &as_bytes(&[0, launch.steps, 0, 0]));
        let table_words = INTERIOR_RING * TABLE_WORDS as u64;
        let tables = buffer("tables", table_words * 4, rw);
        let jobs = buffer("jobs", u64::from(ring) * 32, rw);
        let slot_buf = buffer("slots", u64::from(slots) * SLOT_WORDS as u64 * 4, rw);
        let mut idle = vec![0u32; slots as usize * SLOT_WORDS];
        idle.chunks_exact_mut(SLOT_WORDS).for_each(|s| s[5] = NONE);
        kernel.queue.write_buffer(&slot_buf, 0, &as_bytes(&idle));
        let stack_bytes = u64::from(slots) * u64::from(levels) * RECORD_WORDS as u64 * 4;
        let stacks = buffer("stacks", stack_bytes, rw);
        let results = buffer("results", INTERIOR_RING * COUNT_WORDS * 4, rw);
        let control = buffer("control", CONTROL_WORDS * 4, rw);
        let done = buffer("done", u64::from(TAGS) * 4, rw);
        let bind = kernel.bind(&[
            &params, &tables, &jobs, &slot_buf, &stacks, &results, &control, &done,
        ]);
        Ok(Stream {
            levels,
            groups,
            slots,
            pipeline,
            bind,
            params,
            tables,
            jobs,
            slot_buf,
            stacks,
            results,
            control,
            done,
            ring,
            end: 0,
            head: 0,
            next_interior: 0,
            mirror: vec![0; table_words as usize],
            open: (0..TAGS).map(|_| None).collect(),
            order: VecDeque::new(),
            free: (0..TAGS).rev().collect(),
            rounds: VecDeque::new(),
            submitted: 0,
            reach: 0,
            wg,
            launches: 1,
            fruitless: None,
        })
    }

    /// No batch is open and no round in flight.
    fn is_empty(&self) -> bool {
        self.order.is_empty() && self.rounds.is_empty()
    }

    /// Whether `batch`'s tables fit beside the open batches' (and a tag
    /// is free).
    fn has_room_for(&self, batch: &Batch) -> bool {
        let oldest = self
            .order
            .front()
            .map_or(self.next_interior, |&t| self.batch(t).first);
        let used = self.next_interior - oldest;
        !self.free.is_empty() && used + batch.interiors() as u64 <= INTERIOR_RING
    }

    fn batch(&self, tag: u32) -> &Open {
        self.open[tag as usize].as_ref().expect("an open batch")
    }

    /// Where `count` items from number `first` lie in a ring of `size`:
    /// one range, or two where they wrap.
    fn ranges(first: u64, count: u64, size: u64) -> Vec<(u64, u64)> {
        let at = first % size;
        let head = count.min(size - at);
        let mut out = vec![(at, head)];
        if head < count {
            out.push((0, count - head));
        }
        out
    }

    /// Opens `r`'s batch: its tables and zeroed (biased) counts go on the
    /// card, its jobs wait for room in the queue.
    fn open(&mut self, kernel: &Kernel, launch: &Launch, r: Request) {
        let tag = self.free.pop().expect("a free tag (checked)");
        let first = self.next_interior;
        let n = r.batch.interiors() as u64;
        self.next_interior += n;
        let words = TABLE_WORDS as u64;
        let mut from = 0usize;
        let (lo, hi) = (launch.bias as u32, (launch.bias >> 32) as u32);
        for (at, count) in Self::ranges(first, n, INTERIOR_RING) {
            let part = &r.batch.tables[from..][..(count * words) as usize];
            let place = (at * words) as usize;
            self.mirror[place..place + part.len()].copy_from_slice(part);
            kernel
                .queue
                .write_buffer(&self.tables, place as u64 * 4, &as_bytes(part));
            let counts = [lo, hi, lo, hi].repeat(count as usize);
            let offset = at * COUNT_WORDS * 4;
            kernel
                .queue
                .write_buffer(&self.results, offset, &as_bytes(&counts));
            from += part.len();
        }
        kernel
            .queue
            .write_buffer(&self.done, u64::from(tag) * 4, &as_bytes(&[0]));
        let slot = |i: u32| ((first + u64::from(i)) % INTERIOR_RING) as u32;
        let jobs = r
            .batch
            .jobs
            .iter()
            .map(|j| {
                let mut j = *j;
                (j[0], j[6]) = (slot(j[0]), tag);
                j
            })
            .collect();
        self.open[tag as usize] = Some(Open {
            reply: r.reply,
            given_up: r.given_up,
            first,
            interiors: n,
            jobs,
            put: 0,
            queued: 0,
            done: 0,
            placed: vec![0; n as usize],
            from_round: self.submitted,
        });
        self.order.push_back(tag);
    }

    /// Puts the open batches' jobs in the queue, oldest batch first, while
    /// the ring has room (the jobs it holds that no thread took yet).
    fn put_jobs(&mut self, kernel: &Kernel) {
        let before = self.end;
        for i in 0..self.order.len() {
            let tag = self.order[i];
            let room = self.ring - self.end.wrapping_sub(self.head);
            let o = self.open[tag as usize].as_mut().expect("open");
            if o.given_up.load(Ordering::Relaxed) {
                continue;
            }
            let take = (o.jobs.len() - o.put).min(room as usize);
            if take == 0 {
                continue;
            }
            let part = &o.jobs[o.put..o.put + take];
            o.put += take;
            o.queued += take as u32;
            Self::write_jobs(kernel, &self.jobs, self.ring, self.end, part);
            self.end = self.end.wrapping_add(take as u32);
        }
        if self.end != before {
            kernel
                .queue
                .write_buffer(&self.params, 0, &as_bytes(&[self.end]));
        }
    }

    /// Writes `jobs` to the ring of `ring` jobs from job number `end`.
    fn write_jobs(kernel: &Kernel, buf: &wgpu::Buffer, ring: u32, end: u32, jobs: &[[u32; 8]]) {
        let mut from = 0usize;
        for (at, count) in Self::ranges(u64::from(end), jobs.len() as u64, u64::from(ring)) {
            let part = &jobs[from..from + count as usize];
            kernel
                .queue
                .write_buffer(buf, at * 32, &as_bytes(part.as_flattened()));
            from += count as usize;
        }
    }

    /// Jobs put in and not done (running or waiting).
    fn unfinished(&self) -> u32 {
        self.order
            .iter()
            .map(|&t| {
                let o = self.batch(t);
                o.queued - o.done
            })
            .sum()
    }

    /// Submits a round: launches while jobs are unfinished, then copies of
    /// the queue's counters and of every open batch's counts (so a batch
    /// is answered from the round that finds it done). False if there was
    /// nothing to launch or answer.
    fn submit_round(&mut self, kernel: &Kernel, launch: &Launch) -> bool {
        let wanted = |o: &Open| !o.given_up.load(Ordering::Relaxed);
        let live = self.unfinished() > 0;
        let answers = self.order.iter().any(|&t| {
            let o = self.batch(t);
            wanted(o) && o.finished()
        });
        if !live && !answers {
            return false;
        }
        // As many slots take jobs as there are jobs unfinished, and the
        // launches reach every slot that may still search.
        let active = self.unfinished().next_multiple_of(self.wg).min(self.slots);
        let groups = active.max(self.reach).div_ceil(self.wg).min(self.groups);
        self.reach = self.reach.max(active);
        let params = [self.end, launch.steps, active];
        kernel
            .queue
            .write_buffer(&self.params, 0, &as_bytes(&params));
        // The busiest slot and the steps taken are the round's own.
        kernel
            .queue
            .write_buffer(&self.control, 8, &as_bytes(&[0, 0, 0, 0]));
        let mut encoder = kernel.device.create_command_encoder(&Default::default());
        if live {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &self.bind, &[]);
            for _ in 0..self.launches {
                pass.dispatch_workgroups(groups, 1, 1);
            }
            let n = u64::from(self.launches);
            kernel.launched.fetch_add(n, Ordering::Relaxed);
            let threads = u64::from(groups * self.wg);
            let offered = n * threads * u64::from(launch.steps);
            kernel.offered.fetch_add(offered, Ordering::Relaxed);
        }
        let mut ranges = vec![
            (&self.control, 0, CONTROL_WORDS * 4),
            (&self.done, 0, u64::from(TAGS) * 4),
        ];
        let mut reads = Vec::new();
        for &tag in &self.order {
            let o = self.batch(tag);
            if !wanted(o) {
                continue;
            }
            reads.push((tag, o.first, o.interiors));
            for (at, count) in Self::ranges(o.first, o.interiors, INTERIOR_RING) {
                ranges.push((&self.results, at * COUNT_WORDS * 4, count * COUNT_WORDS * 4));
            }
        }
        let back = kernel.read_later(&mut encoder, &ranges);
        let index = kernel.queue.submit([encoder.finish()]);
        let number = self.submitted;
        self.submitted += 1;
        self.rounds.push_back(Round {
            number,
            active,
            index,
            back,
            reads,
        });
        // More launches a round while jobs wait; fewer once they do not.
        self.launches = if self.end != self.head {
            (self.launches * 2).min(launch.max_launches.max(1))
        } else {
            (self.launches / 2).max(1)
        };
        true
    }

    /// Reads the oldest round back: the queue's counters and each batch's
    /// jobs done; the batches it finds done are answered with the counts
    /// it copied.
    fn finish_round(&mut self, kernel: &Kernel, launch: &Launch) -> Result<(), DeviceError> {
        let round = self.rounds.pop_front().expect("a round in flight");
        let words = round.back.wait(kernel, round.index)?;
        if words[1] != 0 {
            return Err(DeviceError::Overflow);
        }
        let taken = words[0].wrapping_sub(self.head);
        if taken > self.end.wrapping_sub(self.head) {
            return Err(DeviceError::Failed(format!(
                "the card's job queue overran ({} taken, {} put in)",
                words[0], self.end
            )));
        }
        self.head = words[0];
        let taken = u64::from(words[4]) | u64::from(words[5]) << 32;
        kernel.taken.fetch_add(taken, Ordering::Relaxed);
        // Searching after this round: its slots still searching, and any
        // slot a later round lets take a job.
        let later = self.rounds.iter().map(|r| r.active).max().unwrap_or(0);
        self.reach = words[2].max(later);
        for &tag in &self.order {
            let o = self.open[tag as usize].as_mut().expect("open");
            if round.number < o.from_round {
                continue;
            }
            o.done = words[CONTROL_WORDS as usize + tag as usize];
            if o.done > o.queued {
                return Err(DeviceError::Failed(format!(
                    "a batch on the card finished {} of its {} jobs",
                    o.done, o.queued
                )));
            }
        }
        let mut at = (CONTROL_WORDS + u64::from(TAGS)) as usize;
        for (tag, first, interiors) in round.reads {
            let counts = &words[at..at + (interiors * COUNT_WORDS) as usize];
            at += counts.len();
            // The batch it copied may have been given up and its tag reused.
            let Some(o) = self.open[tag as usize]
                .as_ref()
                .filter(|o| o.first == first)
            else {
                continue;
            };
            if o.finished() && !o.given_up.load(Ordering::Relaxed) {
                let o = self.open[tag as usize].take().expect("open");
                drop(o.reply.send(Self::answer(&o, counts, launch.bias)));
                self.close(tag);
            }
        }
        Ok(())
    }

    /// Drops the batches given up whose jobs on the card are done.
    fn drop_given_up(&mut self) {
        let gone: Vec<u32> = (self.order.iter().copied())
            .filter(|&t| {
                let o = self.batch(t);
                o.given_up.load(Ordering::Relaxed) && o.finished()
            })
            .collect();
        for tag in gone {
            self.open[tag as usize] = None;
            self.close(tag);
        }
    }

    /// A batch's counts per interior, less the bias, with the queens
    /// placed to start its split jobs.
    fn answer(o: &Open, counts: &[u32], bias: u64) -> Answer {
        let wide = |lo: u32, hi: u32| (u64::from(hi) << 32 | u64::from(lo)).checked_sub(bias);
        counts
            .chunks_exact(COUNT_WORDS as usize)
            .zip(&o.placed)
            .map(|(w, &placed)| {
                let sols = wide(w[0], w[1]);
                let nodes = wide(w[2], w[3]).and_then(|n| n.checked_add(placed));
                sols.zip(nodes).ok_or(DeviceError::Overflow)
            })
            .collect()
    }

    /// Frees a closed batch's tag.
    fn close(&mut self, tag: u32) {
        self.order.retain(|&t| t != tag);
        self.free.push(tag);
    }

    /// The end of a count: nothing waits in the queue, and half the
    /// threads or more idle while searches still run.
    fn tail(&self) -> bool {
        let running = self.unfinished();
        self.end == self.head
            && running > 0
            && running * 2 <= self.slots
            && self.fruitless != Some(running)
    }

    /// Splits the searches still going (no round in flight: nothing runs
    /// on the card) and puts the new jobs in the queue.
    fn split(&mut self, kernel: &Kernel) -> Result<(), DeviceError> {
        let encoder = kernel.device.create_command_encoder(&Default::default());
        let slot_bytes = self.slot_buf.size();
        let ranges = [
            (&self.slot_buf, 0, slot_bytes),
            (&self.stacks, 0, self.stacks.size()),
        ];
        let mut slots = kernel.read(encoder, &ranges)?;
        let mut stacks = slots.split_off(slot_bytes as usize / 4);
        let room = (self.ring as usize).min(self.slots as usize * 4);
        let levels = self.levels as usize;
        let stolen = steal(&mut slots, &mut stacks, levels, &self.mirror, room);
        if stolen.is_empty() {
            // Not again until a search ends: none of them has a row to give.
            self.fruitless = Some(self.unfinished());
            return Ok(());
        }
        kernel
            .queue
            .write_buffer(&self.slot_buf, 0, &as_bytes(&slots));
        kernel
            .queue
            .write_buffer(&self.stacks, 0, &as_bytes(&stacks));
        for job in &stolen {
            let o = self.open[job[6] as usize]
                .as_mut()
                .expect("a running job's batch");
            let slot = u64::from(job[0]);
            let i = (slot + INTERIOR_RING - o.first % INTERIOR_RING) % INTERIOR_RING;
            o.placed[i as usize] += 1;
            o.queued += 1;
        }
        Self::write_jobs(kernel, &self.jobs, self.ring, self.end, &stolen);
        self.end = self.end.wrapping_add(stolen.len() as u32);
        kernel
            .queue
            .write_buffer(&self.params, 0, &as_bytes(&[self.end]));
        kernel
            .split
            .fetch_add(stolen.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_that_wrap_round_a_ring_lie_in_two_ranges() {
        assert_eq!(Stream::ranges(3, 4, 8), vec![(3, 4)]);
        assert_eq!(Stream::ranges(6, 4, 8), vec![(6, 2), (0, 2)]);
        assert_eq!(Stream::ranges(16, 8, 8), vec![(0, 8)]);
    }
}
