/* The CUDA kernel's source (count.cu) compiled for the host, so that the
 * tests check it where there is no NVIDIA card: threads in blocks, each
 * with its column of its block's stack, their passes interleaved in an
 * order a seed chooses, as a card's warps may interleave them. */

#include <stdlib.h>

#include "count.cu"

/* Counts `count` jobs with `threads` threads in blocks of `wg`, a stack
 * of `levels` rows each (`below` records of it in the block's memory, as
 * the card's launch gives them), as the card would, each thread keeping
 * its job's pairs in its block's memory if `keep` and its top record
 * there too if `flat` (as the card's `count_jobs_kept`, `count_jobs_flat`
 * and `count_jobs_kept_flat` do), adding to `results` (two totals per
 * interior) and raising `busiest` to the most steps one thread took.
 * Returns 0, 1 if a total wrapped, 2 if a thread's stack outgrew its
 * `levels` rows (a fault of the kernel's: jobs whose rows fit never
 * do), 3 if memory ran out. */
u32 nqueens_host_count(const u32 *tables, const u32 *jobs, u32 count, u32 threads, u32 wg,
                       u32 levels, u32 below, int keep, int flat, u64 seed, u64 *results,
                       u64 *busiest) {
    /* The most a thread's `top` may be: its records (times `wg`, flat). */
    u64 most = flat ? (u64)levels * wg : levels;
    u32 blocks = (threads + wg - 1u) / wg;
    /* Each block's memory as the card's launch sizes it (`below` records
     * a thread, then `levels` pairs if kept), and a row more after the
     * last: a thread whose stack outgrows its rows writes one record past
     * them before the check below sees it, and that write stays in the
     * memory given. */
    size_t pairs = keep ? ((size_t)wg * levels + 1u) / 2u : 0u;
    size_t per_block = (size_t)wg * below + pairs;
    Rec *memory = calloc((size_t)blocks * per_block + wg, sizeof(Rec));
    Search *s = malloc((size_t)threads * sizeof(Search));
    u32 *live = malloc((size_t)threads * sizeof(u32));
    u32 control[2] = {0u, 0u};
    u32 alive = threads, outcome = 0u, t;
    if (memory == NULL || s == NULL || live == NULL) {
        outcome = 3u;
        alive = 0u;
    }
    for (t = 0u; t < alive; t++) {
        idle(&s[t]);
        live[t] = t;
    }
    while (alive > 0u && outcome == 0u) {
        u32 pick, passes, p;
        Column c;
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        pick = (u32)(seed % alive);
        t = live[pick];
        passes = 1u + (u32)((seed >> 40) % 16u);
        c = column(memory + (size_t)(t / wg) * per_block, below, wg, t % wg, keep, flat);
        for (p = 0u; p < passes; p++) {
            if (!advance(&s[t], tables, jobs, count, control, results, &c)) {
                finish(&s[t], busiest);
                live[pick] = live[--alive];
                break;
            }
            if (s[t].top > most) {
                outcome = 2u;
                break;
            }
        }
    }
    free(memory);
    free(s);
    free(live);
    return outcome != 0u ? outcome : control[1];
}
