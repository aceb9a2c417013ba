/*
 * The matcher object behind the public API (rtroute.h), shared by matcher.c and the two
 * query walkers (match_reverse.c, match_forward.c). Not part of the public interface.
 */
#ifndef RT_MATCHER_H
#define RT_MATCHER_H

#include "intern.h"
#include "rtroute.h"
#include "trie.h"

struct rt_matcher {
    rt_kind kind;
    rt_interner in;
    rt_store store;
    uint32_t root;  /* the bindings' words in key order */
    uint32_t rroot; /* RT_REVERSE: the same words in reverse order; RT_NONE otherwise */

    size_t count;
    uint32_t id_limit;
    uint32_t *free_ids; /* ids to reuse, last freed first */
    uint32_t n_free_ids, free_ids_cap;

    /* RT_REVERSE: bindings by word count, so that a query longer than every binding (or of a
     * length no binding has) is answered without a walk. */
    size_t len_count[RT_MAX_WORDS + 1];
    uint32_t max_words;

    rt_queue queue;   /* breadth-first walks */
    rt_ids levels[2]; /* RT_REVERSE: the refs of one level and of the next */

    uint64_t *seen; /* rt_match_union: one bit per id, all clear between calls */
    size_t seen_words;

    /* RT_FORWARD scratch, kept between queries (trimmed after a huge one). */
    uint32_t *qwords; /* the query's word ids */
    size_t qwords_cap;
    uint32_t *work; /* pending (ref, position) states */
    size_t work_cap;
    uint32_t *hmap_keys, *hmap_vals, *hmap_used; /* '#' node -> lowest position seen */
    size_t hmap_cap, hmap_n;
};

/* Each appends the matches of one query (each binding once) to out; RT_OK or an error. */
int rt_match_reverse(rt_matcher *m, const char *q, size_t len, rt_direction dir, rt_ids *out);
int rt_match_forward(rt_matcher *m, const char *q, size_t len, rt_ids *out);
/* rt_match_batch for RT_REVERSE (offsets already checked); on error out may hold more. */
int rt_match_reverse_batch(rt_matcher *m, const char *buf, const size_t *offs, size_t n,
                           rt_ids *out, size_t *res_offs);

/* Frees the RT_FORWARD scratch if a large query left it large. */
void rt_forward_trim_scratch(rt_matcher *m);

#endif
