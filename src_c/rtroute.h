/*
 * rtroute native core: word-interned tries for RabbitMQ-style topic matching.
 *
 * Pure C99, no Python. Two matcher kinds share one API:
 *   RT_REVERSE  bindings are concrete dot-separated keys; a query may hold '*' (exactly one
 *               word) and '#' (zero or more words) anywhere, any number of times (the x-rtopic
 *               exchange). Keeps a forward trie and a reversed-key trie and walks whichever the
 *               query's literal anchor makes cheaper.
 *   RT_FORWARD  RabbitMQ's own topic semantics: bindings hold the wildcards, the query is a
 *               concrete routing key.
 *
 * Keys are split on '.'; the empty key has zero words, "a..b" has three ("a", "", "b"), as in
 * RabbitMQ's topic exchange. Each binding key gets a small dense id (reused after removal), and
 * every match result is a list of ids, each matching binding reported once per query.
 */
#ifndef RTROUTE_H
#define RTROUTE_H

#include <stddef.h>
#include <stdint.h>

#define RT_MAX_BINDING_BYTES 255u   /* AMQP shortstr */
#define RT_MAX_QUERY_BYTES 65536u   /* CC/BCC entries are longstr; cap hostile input */

typedef enum { RT_REVERSE = 0, RT_FORWARD = 1 } rt_kind;

/* Which trie a RT_REVERSE query walks; RT_AUTO picks the cheaper one per query. */
typedef enum { RT_AUTO = 0, RT_DIR_FORWARD = 1, RT_DIR_REVERSED = 2 } rt_direction;

enum {
    RT_OK = 0,
    RT_ENOMEM = -1,   /* allocation failed; the matcher is unchanged */
    RT_ETOOLONG = -2, /* key longer than RT_MAX_BINDING_BYTES / query than RT_MAX_QUERY_BYTES */
    RT_EINVAL = -3    /* NULL argument or bad enum value */
};

typedef struct rt_matcher rt_matcher;

/* A growable array of binding ids owned by the caller. */
typedef struct {
    uint32_t *ids;
    size_t len;
    size_t cap;
} rt_ids;

void rt_ids_init(rt_ids *out);
void rt_ids_free(rt_ids *out);

/* Sorts out->ids[from..to) ascending (an LSD radix sort, O(n)). Ids are handed out in
 * insertion order, so a caller that keeps one object per id (the Python wrapper) touches them in
 * allocation order afterwards: for large results that turns random memory reads into sequential
 * ones. Returns RT_OK, or RT_ENOMEM (the range is then left as it was). */
int rt_ids_sort(rt_ids *out, size_t from, size_t to);

rt_matcher *rt_matcher_new(rt_kind kind); /* NULL on allocation failure */
void rt_matcher_free(rt_matcher *m);      /* NULL is a no-op */
rt_kind rt_matcher_kind(const rt_matcher *m);

/* Adds binding key key[0..len). Returns 1 if added, 0 if it was already present (either way
 * *id receives its id), or a negative RT_E* error. */
int rt_add(rt_matcher *m, const char *key, size_t len, uint32_t *id);

/* Removes a binding key. Returns 1 if removed (*id receives the id it had), 0 if absent, or a
 * negative error. Trie nodes left without children or binding are freed. */
int rt_remove(rt_matcher *m, const char *key, size_t len, uint32_t *id);

/* Returns 1 and sets *id if the exact binding key is present, else 0 (or a negative error). */
int rt_find(const rt_matcher *m, const char *key, size_t len, uint32_t *id);

size_t rt_count(const rt_matcher *m);      /* number of binding keys */
size_t rt_id_limit(const rt_matcher *m);   /* every id ever returned is < this */
size_t rt_memory(const rt_matcher *m);     /* bytes held by tries, interner and tables */

/* (Added.) Re-lays out the tries in depth-first order in fresh memory, so that walks touch
 * fewer cache lines (broad matches run about 1.5x faster) and memory freed by removals goes
 * back to the system. Ids are unchanged; O(bindings), about 0.2 s for a million. rt_remove
 * calls it by itself once most of the store is free; call it after a bulk load. RT_OK,
 * RT_EINVAL, or RT_ENOMEM (then the matcher is unchanged).
 *
 * Threads: a matcher is not thread-safe, not even for concurrent queries (they use scratch
 * space held in the matcher); use one per thread or a lock. Result order is unspecified. */
int rt_compact(rt_matcher *m);

/* Appends to out the id of every binding matching query q[0..len), each once. Returns the
 * number appended or a negative error (out keeps what it held before on error). */
long rt_match(rt_matcher *m, const char *q, size_t len, rt_ids *out);

/* As rt_match, forcing a direction (RT_REVERSE only; RT_FORWARD ignores dir). For benchmarks
 * and tests of the reversed-key index. */
long rt_match_dir(rt_matcher *m, const char *q, size_t len, rt_direction dir, rt_ids *out);

/* Batch: n queries, query i is buf[offs[i] .. offs[i+1]) (offs has n+1 entries). Appends the
 * results of query i to out; res_offs (n+1 entries, caller-allocated) receives where each
 * query's results start in out->ids, res_offs[n] the end. Returns RT_OK or a negative error
 * (the first failing query's). */
int rt_match_batch(rt_matcher *m, const char *buf, const size_t *offs, size_t n, rt_ids *out,
                   size_t *res_offs);

/* Union: appends the ids matching any of the n queries, each id once overall (a publish with
 * CC/BCC routes the union of its keys). Returns the number appended or a negative error. */
long rt_match_union(rt_matcher *m, const char *buf, const size_t *offs, size_t n, rt_ids *out);

#endif
