/*
 * Which destinations each binding key reaches, and the delivery planner built on it.
 *
 * A routed x-rtopic publish matches binding keys; the broker-side layout delivers it by
 * republishing with a BCC list of binding keys, and RabbitMQ gives each destination one copy per
 * publish. Sending every matched key costs the broker one lookup per key (20,000 for a '#'
 * publish); one key per destination reaches the same queues. rt_reach keeps, per binding key id
 * (the ids of an rt_matcher), its destinations (small dense ids the caller hands out), and per
 * destination the keys that reach it alone, so that rt_plan picks at most one key per
 * destination in time proportional to the matched (key, destination) pairs.
 *
 * Pure C99, no Python. Not thread-safe (the planner uses scratch space held in the rt_reach).
 */
#ifndef RT_REACH_H
#define RT_REACH_H

#include "rtroute.h"

typedef struct rt_reach rt_reach;

rt_reach *rt_reach_new(void);        /* NULL on allocation failure */
void rt_reach_free(rt_reach *r);     /* NULL is a no-op */

/* Records that binding key id `key` reaches destination id `dest`. Returns 1 if added, 0 if
 * already known, or RT_ENOMEM (nothing changed). Ids are dense: memory follows the largest. */
int rt_reach_add(rt_reach *r, uint32_t key, uint32_t dest);

/* Forgets it. Returns 1 if removed, 0 if it was not known. */
int rt_reach_remove(rt_reach *r, uint32_t key, uint32_t dest);

size_t rt_reach_count(const rt_reach *r, uint32_t key); /* destinations of key */
size_t rt_reach_memory(const rt_reach *r);              /* bytes held */
/* Appends to out the destinations `key` reaches (each once, in no order). Returns how many, or
 * RT_EINVAL / RT_ENOMEM (out then keeps what it held before). */
long rt_reach_dests(const rt_reach *r, uint32_t key, rt_ids *out);

typedef struct {
    size_t matched;      /* distinct binding keys the queries matched */
    size_t destinations; /* distinct destinations those keys reach */
    size_t skipped;      /* of them, reached by the literal keys already */
} rt_plan_stats;

/* Plans one publish: matches the n queries buf[offs[i] .. offs[i+1]) as a union (rt_match_union
 * of m, whose ids r describes), then appends to out the ids of binding keys that together reach
 * every destination of the matched keys and nothing else, at most one key per destination,
 * leaving out the destinations that the first n_literal queries reach as literal binding keys
 * (the routing key and the CC entries, which RabbitMQ routes on every republish). A key that
 * reaches only its destination is preferred; otherwise a matched key reaching it is taken (it
 * reaches nothing outside the matched destinations either). When `matched` is not NULL the
 * matched ids are appended to it as well. Returns the number of ids appended to out, or a
 * negative RT_E* error (out and matched then keep what they held before). */
long rt_plan(rt_matcher *m, rt_reach *r, const char *buf, const size_t *offs, size_t n,
             size_t n_literal, rt_ids *out, rt_ids *matched, rt_plan_stats *stats);

#endif
