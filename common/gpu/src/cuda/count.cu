// Interior searches on an NVIDIA card through CUDA: one depth-first
// search per thread, jobs taken from a counter until a batch's jobs run
// out (as the fast CUDA counters do it), counts straight to the job's
// interior.
//
// The same source is compiled twice: by NVRTC at run time for the card
// (`__CUDACC_RTC__`), and as C on the host for the tests (`host.c`),
// where a seeded order interleaves the threads' steps. So it keeps to the
// C that both take: no references, templates or classes.
//
// A job is what `crate::jobs::Prepared` makes of an interior's start:
// eight words (its interior, start row, masks l, d, r, next-to-last row,
// two unused). An interior's tables are `TABLE_WORDS` words: pair 0 holds
// the first free row's open columns (after a zero), pair k + 1 free row
// k's shift to the next free row and that row's open columns.
//
// A thread's stack holds only rows with candidates left, the row it
// stands on at the top, in registers (`step`), or with the others
// (`step_flat`, one path whichever way); the rows below it lie in the
// block's shared memory, level-major (`stack[level * wg]`, the thread's
// column), so a warp's threads touch consecutive words. Every step places
// the top row's next candidate: it goes down a row if the row below has
// open squares, else takes the next candidate, else backs up to the row
// below on the stack. A queen on the next-to-last row has its last row's
// open squares counted at once (each a completion and a queen placed), so
// completions and queens placed are what plain recursion counts. A thread
// whose search ends takes its next job in the same loop, so its warp's
// other threads step on meanwhile. Each new row needs its pair: where the
// thread keeps them (`count_jobs_kept`, `count_jobs_kept_flat`) from its
// copy of its job's pairs, level-major in the block's shared memory after
// the stacks, made when it takes the job; else (`count_jobs`,
// `count_jobs_flat`) from the interior's tables in the card's memory.

#define TABLE_WORDS 66u
#define JOB_WORDS 8u
#define NONE 0xffffffffu

typedef unsigned int u32;
typedef unsigned long long u64;

#ifdef __CUDACC_RTC__
typedef uint4 Rec;
#define DEVICE static __device__ __forceinline__
#define POPC(x) ((u32)__popc(x))
#define PAIR(p) __ldg((const uint2 *)(p))
#define REC(a, b, c, d) make_uint4(a, b, c, d)
#define TAKE(counter) atomicAdd(counter, 1u)
#define ADD64(at, x) atomicAdd(at, x)
#define FLAG(at) atomicOr(at, 1u)
#define MAX64(at, x) atomicMax(at, x)
#else
typedef struct {
    u32 x, y, z, w;
} Rec;
typedef struct {
    u32 x, y;
} uint2;
#define DEVICE static inline
#if defined(__GNUC__) || defined(__clang__)
#define POPC(x) ((u32)__builtin_popcount(x))
#else
DEVICE u32 POPC(u32 x) {
    u32 n = 0u;
    for (; x != 0u; x &= x - 1u) {
        n++;
    }
    return n;
}
#endif
#define PAIR(p) (*(const uint2 *)(p))
DEVICE Rec REC(u32 a, u32 b, u32 c, u32 d) {
    Rec r = {a, b, c, d};
    return r;
}
DEVICE u32 TAKE(u32 *counter) {
    return (*counter)++;
}
DEVICE u64 ADD64(u64 *at, u64 x) {
    u64 old = *at;
    *at = old + x;
    return old;
}
DEVICE void FLAG(u32 *at) {
    *at |= 1u;
}
DEVICE void MAX64(u64 *at, u64 x) {
    if (x > *at) {
        *at = x;
    }
}
#endif

// One thread's search: its top record (candidates left on the row it
// stands on, and the masks there), that row's number and table pair, and
// its job's counts so far.
typedef struct {
    // Records on the stack, the top one included (0: the job is done);
    // in `step_flat`'s kernels, records times `wg`.
    u32 top;
    u32 interior;
    u32 k;
    u32 pen;
    // The job's queens' columns less its start row: a record's row is its
    // queens' columns less this (one queen a row).
    u32 base;
    u32 cand, l, d, r;
    // Row k's shift to the next free row, and that row's open columns;
    // the pairs of the job's interior (free row k's at `2 * k`), and the
    // job's start row.
    uint2 pair;
    const u32 *rows;
    u32 first;
    // For `step_flat`, which numbers rows by their queens' columns: the
    // job's start row's number so, times `wg` (where its pair is kept),
    // and its next-to-last row's.
    u32 from;
    u32 last;
    u64 sols;
    u64 steps;
    // Steps of the thread's jobs done so far in this launch.
    u64 done;
} Search;

// A thread's columns of its block's shared memory (a level's records lie
// `wg` apart, one for each of the block's threads): its stack, and, where
// the block keeps them (`keep`), its copy of its job's pairs, from the
// job's start row to its next-to-last. A copy turns each new row's read
// of the card's memory, where a warp's threads on as many interiors touch
// as many places, into a read of the block's. Its stack holds the records
// below its top one, which it keeps in registers (see `step`), or, `flat`,
// every record, the top one too (see `step_flat`).
typedef struct {
    Rec *stack;
    uint2 *kept;
    u32 wg;
    int keep;
    int flat;
} Column;

// Free row `k`'s pair in an interior's `rows` (its tables from pair 1).
DEVICE uint2 row_pair(const u32 *rows, u32 k) {
    return PAIR(rows + 2u * k);
}

// Free row `k`'s pair, from the thread's copy if it keeps one.
DEVICE uint2 pair_of(const Search *s, const Column *c, u32 k) {
    if (c->keep) {
        return c->kept[(k - s->first) * c->wg];
    }
    return row_pair(s->rows, k);
}

// Starts job `job` (JOB_WORDS words).
DEVICE void start(Search *s, const u32 *tables, const u32 *job, const Column *c) {
    u32 row = job[1];
    u32 k;
    const u32 *t;
    s->interior = job[0];
    s->l = job[2];
    s->d = job[3];
    s->r = job[4];
    s->pen = job[5];
    t = tables + s->interior * TABLE_WORDS;
    s->cand = t[2u * row + 1u] & ~(s->l | s->d | s->r);
    s->top = s->cand != 0u ? 1u : 0u;
    s->base = POPC(s->d) - row;
    s->k = row;
    s->first = row;
    s->from = POPC(s->d) * c->wg;
    s->last = s->pen + s->base;
    s->rows = t + 2u;
    if (c->keep) {
        for (k = row; k <= s->pen; k++) {
            c->kept[(k - row) * c->wg] = row_pair(s->rows, k);
        }
    }
    s->pair = pair_of(s, c, row);
    s->sols = 0u;
    s->steps = 0u;
    if (c->flat && s->top != 0u) {
        c->stack[0] = REC(s->cand, s->l, s->d, s->r);
        s->top = c->wg;
    }
}

// One step of a search with records left, every record in the block's
// memory (`flat`): the same step as `step`, on one path. The top
// record is read, its next candidate placed, and its candidates left
// written back; a row left with none is taken off the stack, and the new
// row goes on it if it has open squares and is not the last (whose
// squares the next-to-last row counts). So a warp runs each instruction
// once a step whichever way its threads go, where `step`'s branches run
// each way in turn, at the cost of a read of the block's memory a step.
// Here `top` counts the stack's records times `wg`: where the next one
// goes in the thread's column.
DEVICE void step_flat(Search *s, const Column *c) {
    u32 at = s->top - c->wg;
    Rec top = c->stack[at];
    u32 queens = POPC(top.z);
    uint2 pair = c->keep ? c->kept[queens * c->wg - s->from]
                         : row_pair(s->rows, queens - s->base);
    u32 bit = top.x & (0u - top.x);
    u32 rest = top.x ^ bit;
    u32 l = (top.y | bit) << pair.x;
    u32 d = top.z | bit;
    u32 r = (top.w | bit) >> pair.x;
    u32 open = pair.y & ~(l | d | r);
    int down = queens != s->last && open != 0u;
    c->stack[at].x = rest;
    s->steps += 1u;
    s->sols += queens == s->last ? POPC(open) : 0u;
    // The new row goes above the one left, or in its place if it is done.
    at = rest != 0u ? s->top : at;
    if (down) {
        c->stack[at] = REC(open, l, d, r);
    }
    s->top = down ? at + c->wg : at;
}

// One step of a search with records left: places the top row's next
// candidate.
DEVICE void step(Search *s, const Column *c) {
    u32 bit = s->cand & (0u - s->cand);
    u32 rest = s->cand ^ bit;
    u32 l = (s->l | bit) << s->pair.x;
    u32 d = s->d | bit;
    u32 r = (s->r | bit) >> s->pair.x;
    u32 open = s->pair.y & ~(l | d | r);
    s->steps += 1u;
    if (s->k == s->pen) {
        s->sols += POPC(open);
        open = 0u;
    }
    if (open != 0u) {
        // Down a row: the row left keeps its place below if it has
        // candidates left; otherwise the new row takes it.
        if (rest != 0u) {
            c->stack[(s->top - 1u) * c->wg] = REC(rest, s->l, s->d, s->r);
            s->top += 1u;
        }
        s->cand = open;
        s->l = l;
        s->d = d;
        s->r = r;
        s->k += 1u;
    } else {
        s->cand = rest;
        if (rest != 0u) {
            return;
        }
        // The row is done: back to the one below, if any.
        s->top -= 1u;
        if (s->top == 0u) {
            return;
        }
        Rec below = c->stack[(s->top - 1u) * c->wg];
        s->cand = below.x;
        s->l = below.y;
        s->d = below.z;
        s->r = below.w;
        s->k = POPC(s->d) - s->base;
    }
    s->pair = pair_of(s, c, s->k);
}

// Adds `x` to a 64-bit total, flagging a total that wraps.
DEVICE void add64(u64 *at, u64 x, u32 *overflow) {
    if (x != 0u && ADD64(at, x) + x < x) {
        FLAG(overflow);
    }
}

// One pass of a thread's loop: its search done, its counts added to its
// interior's (completions, queens placed) and the next job taken (and
// the next, while a job has no candidates at all); then a step of its
// search. Returns 0 once the jobs have run out. A thread whose search
// ends takes its next job in the same pass as it steps it, so the rest of
// its warp waits only for the take, never for the warp's longest search
// (a loop of steps of its own would hold each thread at its end until
// every thread's search in the warp ended).
DEVICE int advance(Search *s, const u32 *tables, const u32 *jobs, u32 count, u32 *control,
                   u64 *results, const Column *c) {
    u32 j;
    while (s->top == 0u) {
        if (s->interior != NONE) {
            add64(results + 2u * s->interior, s->sols, control + 1u);
            add64(results + 2u * s->interior + 1u, s->steps + s->sols, control + 1u);
            s->done += s->steps;
            s->interior = NONE;
        }
        j = TAKE(control);
        if (j >= count) {
            return 0;
        }
        start(s, tables, jobs + (u64)j * JOB_WORDS, c);
    }
    if (c->flat) {
        step_flat(s, c);
    } else {
        step(s, c);
    }
    return 1;
}

// Thread `lane`'s columns of its block's memory `block`, laid out as the
// launch sizes it: `below` stack records a thread, then, if it keeps
// them, its pairs.
DEVICE Column column(Rec *block, u32 below, u32 wg, u32 lane, int keep, int flat) {
    Column c;
    c.wg = wg;
    c.stack = block + lane;
    c.kept = (uint2 *)(block + below * wg) + lane;
    c.keep = keep;
    c.flat = flat;
    return c;
}

DEVICE void idle(Search *s) {
    s->top = 0u;
    s->interior = NONE;
    s->done = 0u;
}

// A thread whose jobs ran out: its steps raise the launch's busiest
// thread's, `busiest` (starts at 0), so the host knows how many steps the
// launch offered its threads.
DEVICE void finish(const Search *s, u64 *busiest) {
    MAX64(busiest, s->done);
}

#ifdef __CUDACC_RTC__
// The block's shared memory, sized at launch: the stacks, `below` records
// a thread (all its stack's rows, `flat`; else all but one, at least one),
// then, where the block keeps them, `levels` pairs a thread.
extern __shared__ Rec block_stack[];

// A thread's whole loop, its block keeping its jobs' pairs or not, its
// stack flat or not.
DEVICE void run(const u32 *tables, const u32 *jobs, u32 count, u32 below, u32 *control,
                u64 *results, u64 *busiest, int keep, int flat) {
    Search s;
    Column c = column(block_stack, below, blockDim.x, threadIdx.x, keep, flat);
    idle(&s);
    while (advance(&s, tables, jobs, count, control, results, &c)) {
    }
    finish(&s, busiest);
}

// The kernels, one for each way of keeping a thread's stack and its jobs'
// pairs (`NAME` keeping them if `KEEP`, its stack flat if `FLAT`).
// `control[0]` counts the jobs taken and `control[1]` is set if a total
// wraps (both start at 0); `results` holds two 64-bit totals per
// interior, and `busiest` the most steps one thread took (all start at 0).
#define KERNEL(NAME, KEEP, FLAT)                                                                  \
    extern "C" __global__ void NAME(const u32 *__restrict__ tables,                              \
                                    const u32 *__restrict__ jobs, u32 count, u32 below,           \
                                    u32 *control, u64 *results, u64 *busiest) {                   \
        run(tables, jobs, count, below, control, results, busiest, KEEP, FLAT);                   \
    }

KERNEL(count_jobs, 0, 0)
KERNEL(count_jobs_kept, 1, 0)
KERNEL(count_jobs_flat, 0, 1)
KERNEL(count_jobs_kept_flat, 1, 1)
#endif
