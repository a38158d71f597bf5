// Interior searches on a graphics card: one depth-first search per thread,
// jobs taken from a queue, a bounded number of steps per launch.
//
// The host prepends `WG` (threads per workgroup), `LEVELS` (rows a
// thread's stack holds), `ROWS_IN_GROUP` (whether a thread copies its
// job's tables to workgroup memory) and `ROWS` (`LEVELS + 1` pairs a
// thread's copy holds, or 1 where none is kept) as constants. Each
// thread (a *slot*) keeps its search in `slots` and `stacks` between
// launches, so a search of any length runs across as many launches as it
// needs: no shader loop runs more than `params.steps` times (lavapipe
// stops loops silently after 65,535 iterations, and desktop drivers
// reset kernels that run for seconds).
//
// One step places the next candidate of the current row or backs up one
// row. A queen on the next-to-last row is not pushed: the last row's open
// squares are counted at once (each a completion and a queen placed), so
// completions and queens placed are what plain recursion counts.

struct Params {
    // Jobs in the queue.
    jobs: u32,
    // Steps each slot takes in this launch at most.
    steps: u32,
}

// A start state of one interior (as `Interior::split` makes them).
struct Job {
    // The interior's first word in `tables` (33 pairs each: pair k + 1
    // holds row k's shift to the next free row and that row's open
    // columns; pair 0 the first row's open columns).
    base: u32,
    // The free row the search starts on, and the masks on it.
    row: u32,
    l: u32,
    d: u32,
    r: u32,
    // The interior's next-to-last free row.
    pen: u32,
    pad0: u32,
    pad1: u32,
}

// A slot's search between launches.
struct Slot {
    // The job it counts, or NONE.
    job: u32,
    // The row it stands on, and that row's candidates left.
    k: u32,
    bm: u32,
    l: u32,
    d: u32,
    r: u32,
    pad0: u32,
    pad1: u32,
}

const NONE: u32 = 0xffffffffu;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> tables: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> jobs: array<Job>;
@group(0) @binding(3) var<storage, read_write> slots: array<Slot>;
// Rows the slot stands below: LEVELS records per slot, kept between launches.
@group(0) @binding(4) var<storage, read_write> stacks: array<vec4<u32>>;
// Per job: completions (low, high word), queens placed (low, high word).
@group(0) @binding(5) var<storage, read_write> results: array<vec4<u32>>;
// [0]: the next job to take (at most jobs + slots); [1]: jobs finished.
@group(0) @binding(6) var<storage, read_write> control: array<atomic<u32>, 2>;

// Each thread's rows, level-major: a warp's threads touch consecutive words.
var<workgroup> stack: array<vec4<u32>, WG * LEVELS>;
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

// Adds a launch's counts to a job's 64-bit totals, with carries.
fn flush(job: u32, sols: u32, nodes: u32) {
    var t = results[job];
    let s = t.x + sols;
    let n = t.z + nodes;
    t = vec4<u32>(s, t.y + select(0u, 1u, s < sols), n, t.w + select(0u, 1u, n < nodes));
    results[job] = t;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let me = gid.x;
    var s = slots[me];
    var pairs = 0u;
    var start = 0u;
    var pen = 0u;
    if s.job != NONE {
        let job = jobs[s.job];
        pairs = job.base / 2u;
        start = job.row;
        pen = job.pen;
        keep_rows(pairs, start, pen, lid);
        for (var i = start; i < s.k; i++) {
            stack[(i - start) * WG + lid] = stacks[me * LEVELS + i - start];
        }
    }
    var sols = 0u;
    var nodes = 0u;
    for (var step = 0u; step < params.steps; step++) {
        if s.job == NONE {
            // Once the queue is empty, idle slots stop taking from it, so
            // the counter passes the number of jobs by at most the slots
            // that looked at once, and never wraps round.
            if atomicLoad(&control[0]) >= params.jobs {
                break;
            }
            let j = atomicAdd(&control[0], 1u);
            if j >= params.jobs {
                break;
            }
            let job = jobs[j];
            pairs = job.base / 2u;
            start = job.row;
            pen = job.pen;
            keep_rows(pairs, start, pen, lid);
            s = Slot(j, job.row, tables[pairs + job.row].y & ~(job.l | job.d | job.r), job.l, job.d, job.r, 0u, 0u);
            continue;
        }
        if s.bm != 0u {
            let bit = s.bm & (0u - s.bm);
            s.bm ^= bit;
            nodes += 1u;
            let t = row_pair(pairs, s.k, start, lid);
            let l = (s.l | bit) << t.x;
            let d = s.d | bit;
            let r = (s.r | bit) >> t.x;
            let open = t.y & ~(l | d | r);
            if s.k == pen {
                let c = countOneBits(open);
                sols += c;
                nodes += c;
            } else {
                stack[(s.k - start) * WG + lid] = vec4<u32>(s.bm, s.l, s.d, s.r);
                s = Slot(s.job, s.k + 1u, open, l, d, r, 0u, 0u);
            }
        } else if s.k == start {
            flush(s.job, sols, nodes);
            sols = 0u;
            nodes = 0u;
            atomicAdd(&control[1], 1u);
            s.job = NONE;
        } else {
            s.k -= 1u;
            let e = stack[(s.k - start) * WG + lid];
            s = Slot(s.job, s.k, e.x, e.y, e.z, e.w, 0u, 0u);
        }
    }
    if s.job != NONE {
        flush(s.job, sols, nodes);
        for (var i = start; i < s.k; i++) {
            stacks[me * LEVELS + i - start] = stack[(i - start) * WG + lid];
        }
    }
    slots[me] = s;
}
