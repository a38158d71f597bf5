// Interior searches on a graphics card: one depth-first search per thread,
// jobs taken from a queue the host keeps topping up, a bounded number of
// steps per launch.
//
// The host prepends `WG` (threads per workgroup), `LEVELS` (rows a
// thread's stack holds), `BELOW` (`LEVELS` less one, at least one: the
// records it keeps in workgroup memory), `ROWS_IN_GROUP` (whether a
// thread copies its job's tables to workgroup memory), `ROWS` (`LEVELS`
// pairs a thread's copy holds, or 1 where none is kept), `JOB_MASK`
// (the job ring's size less one: a power of two less one), `NESTED`
// (whether a thread steps its search in a loop of its own) and `FLAT`
// (whether a thread keeps its top record in workgroup memory with the
// others, stepping on one path; `BELOW` is then `LEVELS`) as
// constants.
// Each thread (a *slot*) keeps its search in `slots` and `stacks` between
// launches, so a search of any length runs across as many launches as it
// needs: a launch's loops run about as many times as its steps, each job
// taken costing one, at most twice as many in all with a few more (see
// `SOFTWARE_STEPS` in cards.rs: lavapipe stops loops silently after
// 65,535 iterations, and desktop drivers reset kernels that run for
// seconds).
//
// The queue is a ring of jobs: `control[0]` counts the jobs taken and
// `params.end` the jobs put in, both as wrapping 32-bit counters, and job
// `j` lies at `j & JOB_MASK`. A slot takes the next job with an add, and
// hands back a number past the end (see `take`), so between launches the
// counter is the jobs taken: the host puts new jobs behind it and raises
// the end.
//
// A thread's stack holds only rows with candidates left, the row it
// stands on at the top. Every step places the top row's next candidate,
// and takes the row off the stack if that was its last; the row below the
// new queen goes on the stack only if it has candidates. So every step
// places one queen, and the threads of a warp run the same instructions
// (no step backs up: a row with nothing left is never on the stack), and
// the job ends when its stack is empty. The top record lives in
// registers, with its row's number and table pair: a step that stays on
// its row touches no memory, and only a step down a row or back to the
// row below moves a record between registers and workgroup memory (once
// each way at most per row entered). A row's number is its queens'
// columns less the job's (`base`: one queen a row). `FLAT`, every record
// lies in workgroup memory and a step takes one path whichever way the
// search goes: it reads the top record, writes back its candidates left,
// takes it off the stack if none are, and writes the new row on if it
// goes down (its one condition), so a warp runs each instruction once a
// step whichever way its threads go. A queen on the
// next-to-last row has its last row's open squares counted at once (each
// a completion and a queen placed), so completions and queens placed are
// what plain recursion counts. Counts go to the job's interior (64 bits,
// added with carries, so the jobs of one interior can finish at once),
// and a finished job to its batch's count of jobs done.

struct Params {
    // Jobs put in the queue so far (wrapping).
    end: u32,
    // Steps each slot takes in this launch at most.
    steps: u32,
    // Slots that take jobs (the first ones): the queue's jobs go to as
    // few warps as they fill, and the rest, once idle, end the launch.
    takers: u32,
    pad: u32,
}

// A start state of one interior (as `Interior::split` makes them).
struct Job {
    // The interior's place in `tables` (33 pairs each: pair k + 1 holds
    // row k's shift to the next free row and that row's open columns;
    // pair 0 the first row's open columns) and in `results`.
    interior: u32,
    // The free row the search starts on, and the masks on it.
    row: u32,
    l: u32,
    d: u32,
    r: u32,
    // The interior's next-to-last free row.
    pen: u32,
    // The batch it belongs to: its place in `done` (below 65,536, as the
    // interior is).
    tag: u32,
    pad: u32,
}

// A slot's search between launches.
struct Slot {
    // Rows on its stack (each with candidates left: its records).
    top: u32,
    // Its queens' columns less its row, on every row of its job.
    base: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    // Its job's interior | batch << 16 (as in `Job`), or NONE when idle.
    owner: u32,
    // Its job's start row | next-to-last row << 8 (kept between launches).
    info: u32,
    pad: u32,
}

const NONE: u32 = 0xffffffffu;
const PAIRS: u32 = 33u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> tables: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> jobs: array<Job>;
@group(0) @binding(3) var<storage, read_write> slots: array<Slot>;
// The slot's stack: LEVELS records per slot (a row's candidates left and
// its masks), kept between launches.
@group(0) @binding(4) var<storage, read_write> stacks: array<vec4<u32>>;
// Per interior: completions (low, high word), queens placed (low, high word).
@group(0) @binding(5) var<storage, read_write> results: array<atomic<u32>>;
// [0]: jobs taken (wrapping); [1]: set once a count passes 64 bits;
// [2]: the highest slot (plus one) still searching at a launch's end;
// [4], [5]: the steps the threads took, low and high word (how busy the
// card was: against the launches' threads times their steps);
// [6]: workgroups running now; [7]: the most that ran at once (how many
// the card holds, when each runs long enough to meet the others).
@group(0) @binding(6) var<storage, read_write> control: array<atomic<u32>, 8>;
// Per batch: its jobs finished.
@group(0) @binding(7) var<storage, read_write> done: array<atomic<u32>>;

// The highest slot (plus one) of the workgroup still searching at the
// launch's end, and the steps its threads took (both start at zero).
var<workgroup> busiest: atomic<u32>;
var<workgroup> used: atomic<u32>;
// Each thread's stack below its top record (which it keeps in registers),
// or, `FLAT`, all of it, level-major: a warp's threads touch consecutive
// words.
var<workgroup> stack: array<vec4<u32>, WG * BELOW>;
// Each thread's copy of its job's pairs from the start row down, level-major.
var<workgroup> rows: array<vec2<u32>, WG * ROWS>;

// Copies the pairs of rows `start..=pen` (`pairs` is the job's first pair)
// to the thread's workgroup memory, where it keeps them.
fn keep_rows(pairs: u32, start: u32, pen: u32, lid: u32) {
    if ROWS_IN_GROUP {
        for (var k = start; k <= pen; k++) {
            rows[(k - start) * WG + lid] = tables[pairs + k + 1u];
        }
    }
}

// Row `k`'s shift to the next free row and that row's open columns: from
// the thread's copy, if it keeps one. Without it, each thread of a warp
// reads its own interior's table: a load that serves few of them at once.
fn row_pair(pairs: u32, k: u32, start: u32, lid: u32) -> vec2<u32> {
    if ROWS_IN_GROUP {
        return rows[(k - start) * WG + lid];
    }
    return tables[pairs + k + 1u];
}

// A step's queen: the first candidate of the row `top` (candidates left,
// masks l, d, r) whose pair is `p`, its candidates left after it, and the
// row below it: its open squares and masks.
struct Placed {
    rest: u32,
    below: vec4<u32>,
}

fn place(top: vec4<u32>, p: vec2<u32>) -> Placed {
    let bit = top.x & (0u - top.x);
    let l = (top.y | bit) << p.x;
    let d = top.z | bit;
    let r = (top.w | bit) >> p.x;
    return Placed(top.x ^ bit, vec4<u32>(p.y & ~(l | d | r), l, d, r));
}

// Adds `x` to the 64-bit counter whose low word is `results[at]`: a carry
// is seen by the one add that made it, so adds at once stay exact.
fn add64(at: u32, x: u32) {
    if x == 0u {
        return;
    }
    let old = atomicAdd(&results[at], x);
    if old + x < old {
        if atomicAdd(&results[at + 1u], 1u) == 0xffffffffu {
            atomicStore(&control[1], 1u);
        }
    }
}

// Adds a launch's counts to an interior's totals.
fn flush(interior: u32, sols: u32, nodes: u32) {
    add64(interior * 4u, sols);
    add64(interior * 4u + 2u, nodes);
}

// Whether job number `h` lies before the queue's end (wrapping: the
// counter passes the end by at most the threads taking at once).
fn queued(h: u32) -> bool {
    return params.end - h - 1u < 0x80000000u;
}

// The next job's place in the ring, or NONE (never a place: the ring is
// smaller) when the queue is empty or slot `me` takes no jobs. One add
// per take, never retried (a compare-exchange loop retries once for every
// thread that took first: thousands of times on a card whose idle threads
// all take at a launch's start). A thread that took past the end hands
// its number back, so the counter is at the end again when the launch
// ends, and no number before the end is taken twice: once the counter
// reaches the end it stays there or past it until the launch ends.
fn take(me: u32) -> u32 {
    if me >= params.takers || !queued(atomicLoad(&control[0])) {
        return NONE;
    }
    let h = atomicAdd(&control[0], 1u);
    if queued(h) {
        return h & JOB_MASK;
    }
    atomicSub(&control[0], 1u);
    return NONE;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let me = gid.x;
    if lid == 0u {
        atomicMax(&control[7], atomicAdd(&control[6], 1u) + 1u);
    }
    var s = slots[me];
    var pairs = (s.owner & 0xffffu) * PAIRS;
    var start = s.info & 0xffu;
    var pen = s.info >> 8u;
    // The top record (the row the thread stands on) in registers: its
    // candidates left and masks, its row's number and pair. The records
    // below it are in workgroup memory (all of them, and the top one's
    // copy, `FLAT`, whose steps use neither these registers nor `k`).
    var cur = vec4<u32>(0u);
    var k = 0u;
    var pair = vec2<u32>(0u);
    if s.owner != NONE {
        keep_rows(pairs, start, pen, lid);
        if s.top != 0u {
            for (var i = 0u; i + select(1u, 0u, FLAT) < s.top; i++) {
                stack[i * WG + lid] = stacks[me * LEVELS + i];
            }
            cur = stacks[me * LEVELS + s.top - 1u];
            k = countOneBits(cur.z) - s.base;
            pair = row_pair(pairs, k, start, lid);
        }
    }
    var sols = 0u;
    var step = 0u;
    // The step from which the search's queens placed are counted: each
    // step places one, and each completion counted is one more.
    var mark = 0u;
    // Each pass closes the thread's ended search and takes the next job,
    // or steps the search: one step (so that a thread whose search ends
    // takes its next job at once, while its warp steps on), or, NESTED,
    // until the search ends or the launch's steps run out (see
    // `Launch::nested` in kernel.rs).
    loop {
        if step >= params.steps {
            break;
        }
        if s.top == 0u {
            if s.owner != NONE {
                flush(s.owner & 0xffffu, sols, sols + step - mark);
                sols = 0u;
                atomicAdd(&done[s.owner >> 16u], 1u);
                s.owner = NONE;
            }
            let j = take(me);
            if j == NONE {
                break;
            }
            step += 1u;
            mark = step;
            let job = jobs[j];
            pairs = job.interior * PAIRS;
            start = job.row;
            pen = job.pen;
            keep_rows(pairs, start, pen, lid);
            let open = tables[pairs + job.row].y & ~(job.l | job.d | job.r);
            cur = vec4<u32>(open, job.l, job.d, job.r);
            let top = select(0u, 1u, open != 0u);
            let base = countOneBits(job.d) - job.row;
            k = job.row;
            pair = row_pair(pairs, k, start, lid);
            s = Slot(top, base, 0u, 0u, 0u, job.interior | (job.tag << 16u), start | (pen << 8u), 0u);
            if FLAT && top != 0u {
                stack[lid] = cur;
            }
            continue;
        }
        if FLAT {
            loop {
                step += 1u;
                let at = (s.top - 1u) * WG + lid;
                let top = stack[at];
                let kk = countOneBits(top.z) - s.base;
                let q = place(top, row_pair(pairs, kk, start, lid));
                let last = kk == pen;
                let down = !last && q.below.x != 0u;
                sols += select(0u, countOneBits(q.below.x), last);
                stack[at].x = q.rest;
                // The new row goes above the one left, or in its place if
                // it is done.
                let next = select(at, at + WG, q.rest != 0u);
                if down {
                    stack[next] = q.below;
                }
                s.top = s.top + select(0u, 1u, down) - select(0u, 1u, q.rest == 0u);
                if s.top == 0u || !NESTED || step >= params.steps {
                    break;
                }
            }
            continue;
        }
        loop {
            step += 1u;
            let q = place(cur, pair);
            let rest = q.rest;
            let open = q.below.x;
            let down = k != pen && open != 0u;
            if down {
                // Down a row: the row left keeps its place below if it has
                // candidates left; otherwise the new row takes it.
                if rest != 0u {
                    stack[(s.top - 1u) * WG + lid] = vec4<u32>(rest, cur.y, cur.z, cur.w);
                    s.top += 1u;
                }
                cur = q.below;
                k += 1u;
            } else {
                if k == pen {
                    sols += countOneBits(open);
                }
                cur.x = rest;
                if rest == 0u {
                    // The row is done: back to the one below, if any.
                    s.top -= 1u;
                    if s.top == 0u {
                        break;
                    }
                    cur = stack[(s.top - 1u) * WG + lid];
                    k = countOneBits(cur.z) - s.base;
                }
            }
            // A new row (down, or back): its pair.
            if down || rest == 0u {
                pair = row_pair(pairs, k, start, lid);
            }
            if !NESTED || step >= params.steps {
                break;
            }
        }
    }
    if s.owner != NONE {
        atomicMax(&busiest, me + 1u);
        flush(s.owner & 0xffffu, sols, sols + step - mark);
        if s.top != 0u {
            for (var i = 0u; i + select(1u, 0u, FLAT) < s.top; i++) {
                stacks[me * LEVELS + i] = stack[i * WG + lid];
            }
            if !FLAT {
                stacks[me * LEVELS + s.top - 1u] = cur;
            }
        }
    }
    slots[me] = s;
    atomicAdd(&used, step);
    // One thread a workgroup tells the card's counters (a launch's
    // threads are many; its workgroups far fewer).
    workgroupBarrier();
    if lid == 0u {
        atomicSub(&control[6], 1u);
        let b = atomicLoad(&busiest);
        if b != 0u {
            atomicMax(&control[2], b);
        }
        let u = atomicLoad(&used);
        let old = atomicAdd(&control[4], u);
        if old + u < old {
            atomicAdd(&control[5], 1u);
        }
    }
}
