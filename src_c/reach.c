#include "reach.h"

#include <stdlib.h>
#include <string.h>
#include "alloc.h"
#include "ids.h"

typedef struct {
    uint32_t n, cap;   /* destinations; cap 0 or 1: the one is inline */
    uint32_t one;      /* the destination when cap <= 1 */
    uint32_t solo_pos; /* n == 1: where the key sits in its destination's solo list */
    uint32_t *many;    /* cap > 1 */
} key_reach;

typedef struct {
    uint32_t *solo; /* keys that reach this destination and nothing else */
    uint32_t n, cap;
} dest_reach;

enum { UNSEEN = 0, SEEN = 1, COVERED = 2 };

struct rt_reach {
    key_reach *keys;
    size_t n_keys;
    dest_reach *dests;
    uint8_t *state;  /* planner scratch per destination, UNSEEN between calls */
    uint32_t *first; /* planner scratch: the first matched key seen reaching a destination */
    size_t n_dests;
    rt_ids found;   /* planner scratch: the destinations seen, in order */
    rt_ids scratch; /* planner scratch: the matched ids when the caller does not want them */
};

rt_reach *rt_reach_new(void)
{
    rt_reach *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    rt_ids_init(&r->found);
    rt_ids_init(&r->scratch);
    return r;
}

void rt_reach_free(rt_reach *r)
{
    size_t i;
    if (!r)
        return;
    for (i = 0; i < r->n_keys; i++)
        if (r->keys[i].cap > 1)
            free(r->keys[i].many);
    for (i = 0; i < r->n_dests; i++)
        free(r->dests[i].solo);
    free(r->keys);
    free(r->dests);
    free(r->state);
    free(r->first);
    rt_ids_free(&r->found);
    rt_ids_free(&r->scratch);
    free(r);
}

static const uint32_t *dests_of(const key_reach *k)
{
    return k->cap > 1 ? k->many : &k->one;
}

static size_t grown(size_t have, size_t need)
{
    size_t cap = have ? have : 64;
    while (cap <= need)
        cap *= 2;
    return cap;
}

/* Makes key id `key` and destination id `dest` addressable. RT_OK or RT_ENOMEM. */
static int reserve(rt_reach *r, uint32_t key, uint32_t dest)
{
    if (key >= r->n_keys) {
        size_t cap = grown(r->n_keys, key);
        key_reach *keys = realloc(r->keys, cap * sizeof *keys);
        if (!keys)
            return RT_ENOMEM;
        memset(keys + r->n_keys, 0, (cap - r->n_keys) * sizeof *keys);
        r->keys = keys;
        r->n_keys = cap;
    }
    if (dest >= r->n_dests) {
        size_t cap = grown(r->n_dests, dest);
        dest_reach *dests = realloc(r->dests, cap * sizeof *dests);
        uint8_t *state;
        uint32_t *first;
        if (!dests)
            return RT_ENOMEM;
        memset(dests + r->n_dests, 0, (cap - r->n_dests) * sizeof *dests);
        r->dests = dests;
        state = realloc(r->state, cap * sizeof *state);
        if (!state)
            return RT_ENOMEM; /* dests grew, harmlessly: n_dests is unchanged */
        memset(state + r->n_dests, 0, (cap - r->n_dests) * sizeof *state);
        r->state = state;
        first = realloc(r->first, cap * sizeof *first);
        if (!first)
            return RT_ENOMEM;
        r->first = first;
        r->n_dests = cap;
    }
    return RT_OK;
}

static int solo_push(rt_reach *r, uint32_t dest, uint32_t key)
{
    dest_reach *d = &r->dests[dest];
    if (d->n == d->cap) {
        uint32_t cap = d->cap ? d->cap * 2 : 2;
        uint32_t *solo = realloc(d->solo, cap * sizeof *solo);
        if (!solo)
            return RT_ENOMEM;
        d->solo = solo;
        d->cap = cap;
    }
    r->keys[key].solo_pos = d->n;
    d->solo[d->n++] = key;
    return RT_OK;
}

static void solo_drop(rt_reach *r, uint32_t dest, uint32_t key)
{
    dest_reach *d = &r->dests[dest];
    uint32_t pos = r->keys[key].solo_pos, last;
    if (pos >= d->n || d->solo[pos] != key)
        return; /* not listed: its push failed for want of memory */
    last = d->solo[--d->n];
    d->solo[pos] = last;
    r->keys[last].solo_pos = pos;
}

int rt_reach_add(rt_reach *r, uint32_t key, uint32_t dest)
{
    key_reach *k;
    uint32_t i;
    if (!r)
        return RT_EINVAL;
    if (reserve(r, key, dest) != RT_OK)
        return RT_ENOMEM;
    k = &r->keys[key];
    for (i = 0; i < k->n; i++)
        if (dests_of(k)[i] == dest)
            return 0;
    /* the solo list has room before anything changes, so that a failure changes nothing */
    if (k->n == 0) {
        if (solo_push(r, dest, key) != RT_OK)
            return RT_ENOMEM;
        k->one = dest;
        k->n = 1;
        if (k->cap == 0)
            k->cap = 1;
        return 1;
    }
    if (k->n == k->cap) {
        uint32_t cap = k->cap * 2 < 4 ? 4 : k->cap * 2;
        uint32_t *many = k->cap > 1 ? realloc(k->many, cap * sizeof *many)
                                    : malloc(cap * sizeof *many);
        if (!many)
            return RT_ENOMEM;
        if (k->cap <= 1)
            many[0] = k->one;
        k->many = many;
        k->cap = cap;
    }
    if (k->n == 1)
        solo_drop(r, dests_of(k)[0], key); /* it reaches two destinations now */
    k->many[k->n++] = dest;
    return 1;
}

int rt_reach_remove(rt_reach *r, uint32_t key, uint32_t dest)
{
    key_reach *k;
    uint32_t i, *ds;
    if (!r)
        return RT_EINVAL;
    if (key >= r->n_keys)
        return 0;
    k = &r->keys[key];
    ds = k->cap > 1 ? k->many : &k->one;
    for (i = 0; i < k->n && ds[i] != dest; i++)
        ;
    if (i == k->n)
        return 0;
    if (k->n == 1) {
        solo_drop(r, dest, key);
        k->n = 0;
        return 1;
    }
    ds[i] = ds[--k->n];
    if (k->n == 1) {
        uint32_t only = ds[0];
        free(k->many);
        k->many = NULL;
        k->cap = 1;
        k->one = only;
        /* it reaches one destination alone again; without room for that the planner simply
         * does not know it as that destination's own key (still correct, only larger) */
        if (solo_push(r, only, key) != RT_OK)
            k->solo_pos = UINT32_MAX;
    }
    return 1;
}

size_t rt_reach_count(const rt_reach *r, uint32_t key)
{
    return r && key < r->n_keys ? r->keys[key].n : 0;
}

long rt_reach_dests(const rt_reach *r, uint32_t key, rt_ids *out)
{
    const key_reach *k;
    if (!r || !out)
        return RT_EINVAL;
    if (key >= r->n_keys)
        return 0;
    k = &r->keys[key];
    if (rt_ids_reserve(out, k->n) != RT_OK)
        return RT_ENOMEM;
    memcpy(out->ids + out->len, dests_of(k), k->n * sizeof *out->ids);
    out->len += k->n;
    return (long)k->n;
}

size_t rt_reach_memory(const rt_reach *r)
{
    size_t bytes, i;
    if (!r)
        return 0;
    bytes = sizeof *r + r->n_keys * sizeof *r->keys
        + r->n_dests * (sizeof *r->dests + sizeof *r->state + sizeof *r->first)
        + (r->found.cap + r->scratch.cap) * sizeof(uint32_t);
    for (i = 0; i < r->n_keys; i++)
        if (r->keys[i].cap > 1)
            bytes += r->keys[i].cap * sizeof(uint32_t);
    for (i = 0; i < r->n_dests; i++)
        bytes += r->dests[i].cap * sizeof(uint32_t);
    return bytes;
}

#define LITERAL_COVER 0x80000000u

/* Leaves out of out->ids[from..) every key whose destinations the literal keys and the other
 * keys kept reach already (a key taken for one destination may be covered, later, by a key
 * taken for another): no key kept adds nothing. Uses r->first as a count of the keys (or the
 * literal cover) reaching each destination found. */
static void prune(rt_matcher *m, rt_reach *r, const char *buf, const size_t *offs,
                  size_t n_literal, rt_ids *out, size_t from)
{
    size_t i, j, kept = from;
    for (i = 0; i < r->found.len; i++)
        r->first[r->found.ids[i]] = 0;
    for (i = 0; i < n_literal; i++) {
        uint32_t key;
        if (rt_find(m, buf + offs[i], offs[i + 1] - offs[i], &key) != 1 || key >= r->n_keys)
            continue;
        for (j = 0; j < r->keys[key].n; j++)
            r->first[dests_of(&r->keys[key])[j]] = LITERAL_COVER;
    }
    for (i = from; i < out->len; i++) {
        const key_reach *k = &r->keys[out->ids[i]];
        for (j = 0; j < k->n; j++)
            r->first[dests_of(k)[j]]++;
    }
    for (i = from; i < out->len; i++) {
        const key_reach *k = &r->keys[out->ids[i]];
        int needed = 0;
        for (j = 0; j < k->n && !needed; j++)
            needed = r->first[dests_of(k)[j]] == 1;
        if (needed) {
            out->ids[kept++] = out->ids[i];
            continue;
        }
        for (j = 0; j < k->n; j++)
            r->first[dests_of(k)[j]]--;
    }
    out->len = kept;
}

long rt_plan(rt_matcher *m, rt_reach *r, const char *buf, const size_t *offs, size_t n,
             size_t n_literal, rt_ids *out, rt_ids *matched, rt_plan_stats *stats)
{
    rt_ids *ids;
    size_t before_out, before_ids, i, j, skipped = 0;
    int pass;
    long got;
    if (!m || !r || !out || !stats || n_literal > n)
        return RT_EINVAL;
    ids = matched ? matched : &r->scratch;
    if (!matched)
        r->scratch.len = 0;
    before_ids = ids->len;
    before_out = out->len;
    got = rt_match_union(m, buf, offs, n, ids);
    if (got < 0)
        return got;
    r->found.len = 0;
    /* every destination the matched keys reach, each once, with the first key reaching it */
    for (i = before_ids; i < ids->len; i++) {
        uint32_t key = ids->ids[i];
        const key_reach *k;
        const uint32_t *ds;
        if (key >= r->n_keys)
            continue;
        k = &r->keys[key];
        ds = dests_of(k);
        for (j = 0; j < k->n; j++) {
            uint32_t d = ds[j];
            if (r->state[d] != UNSEEN)
                continue;
            if (rt_ids_push(&r->found, d) != RT_OK)
                goto nomem;
            r->state[d] = SEEN;
            r->first[d] = key;
        }
    }
    /* those the routing key and CC reach on every republish need no key */
    for (i = 0; i < n_literal; i++) {
        uint32_t key;
        const key_reach *k;
        if (rt_find(m, buf + offs[i], offs[i + 1] - offs[i], &key) != 1 || key >= r->n_keys)
            continue;
        k = &r->keys[key];
        for (j = 0; j < k->n; j++) {
            uint32_t d = dests_of(k)[j];
            if (r->state[d] == SEEN) {
                r->state[d] = COVERED;
                skipped++;
            }
        }
    }
    /* first the destinations that no key reaches alone: the shared key taken for one may
     * cover several; then one own key for each destination still uncovered */
    for (pass = 0; pass < 2; pass++) {
        for (i = 0; i < r->found.len; i++) {
            uint32_t d = r->found.ids[i], key;
            const key_reach *k;
            if (r->state[d] == COVERED || (pass == 0) != (r->dests[d].n == 0))
                continue;
            key = pass == 0 ? r->first[d] : r->dests[d].solo[0];
            if (rt_ids_push(out, key) != RT_OK)
                goto nomem;
            k = &r->keys[key];
            for (j = 0; j < k->n; j++)
                r->state[dests_of(k)[j]] = COVERED;
        }
    }
    prune(m, r, buf, offs, n_literal, out, before_out);
    for (i = 0; i < r->found.len; i++)
        r->state[r->found.ids[i]] = UNSEEN;
    stats->matched = ids->len - before_ids;
    stats->destinations = r->found.len;
    stats->skipped = skipped;
    if (!matched)
        r->scratch.len = 0;
    return (long)(out->len - before_out);
nomem:
    for (i = 0; i < r->found.len; i++)
        r->state[r->found.ids[i]] = UNSEEN;
    ids->len = before_ids;
    out->len = before_out;
    return RT_ENOMEM;
}
