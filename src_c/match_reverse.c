/*
 * RT_REVERSE queries: the bindings are concrete keys, the query may hold '*' (one word) and
 * '#' (zero or more words) anywhere.
 *
 * The query becomes a token list with every run of wildcards normalised to its '*'s followed
 * by at most one '#' (a run of k '*' and at least one '#' matches exactly "k or more words"), so
 * a '#' is always followed by a literal, a '*' or the end. The walk then has three stages:
 *   1. the tokens before the first '#' are matched level by level (a literal is one binary
 *      search, a '*' visits every kid);
 *   2. if that '#' is the last token, every binding below each node reached matches;
 *   3. otherwise the rest is a small NFA (one bit per token position) run over the subtree of
 *      each node reached: the trie is a tree, so every node is visited at most once, with the
 *      set of positions any path can be at. That bounds the work by the subtree size whatever
 *      the number of '#', and no binding can be reported twice.
 * Walking the reversed-key trie with the reversed tokens gives the same set; RT_AUTO picks the
 * direction whose anchor (the literals before the first '#') is longer.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "ids.h"
#include "matcher.h"

#define TOK_STAR 0xfffffffeu
#define TOK_HASH 0xfffffffdu
#define MAX_TOKENS (2 * RT_MAX_WORDS + 2)
#define MAX_SET_WORDS ((MAX_TOKENS + 1 + 63) / 64)

typedef struct {
    uint32_t t[MAX_TOKENS];
    uint32_t n;
} pattern;

/* Rewrites each run of wildcards as its '*'s then one '#' if it had any. */
static void normalize(pattern *p)
{
    uint32_t i = 0, o = 0;
    while (i < p->n) {
        uint32_t stars = 0;
        int hash = 0;
        if (p->t[i] != TOK_STAR && p->t[i] != TOK_HASH) {
            p->t[o++] = p->t[i++];
            continue;
        }
        for (; i < p->n && (p->t[i] == TOK_STAR || p->t[i] == TOK_HASH); i++) {
            if (p->t[i] == TOK_STAR)
                stars++;
            else
                hash = 1;
        }
        while (stars--)
            p->t[o++] = TOK_STAR;
        if (hash)
            p->t[o++] = TOK_HASH;
    }
    p->n = o;
}

/*
 * Splits the query into tokens, and meanwhile walks its leading literals down the forward
 * trie: *prefix receives the kid ref they lead to (the answer itself if the query has no
 * wildcard). Returns 0 if the query cannot match anything: a literal word no binding holds, a
 * leading literal path no binding has, or more non-'#' words than the longest binding has.
 */
static int tokenize(const rt_matcher *m, const char *q, size_t len, pattern *p, uint32_t *prefix)
{
    const rt_store *s = &m->store;
    const char *w = q, *end = q + len;
    uint32_t words = 0, hash_run = 0, ref = m->root;
    int literal_prefix = 1;
    p->n = 0;
    *prefix = ref;
    if (len == 0)
        return 1;
    for (;;) {
        const char *dot = memchr(w, '.', (size_t)(end - w));
        const char *e = dot ? dot : end;
        size_t wl = (size_t)(e - w);
        if (wl == 1 && *w == '#') {
            if (!hash_run) /* consecutive '#' are one; normalize() handles the rest */
                p->t[p->n++] = TOK_HASH;
            hash_run = 1;
            literal_prefix = 0;
        } else {
            uint32_t tok = TOK_STAR;
            if (wl != 1 || *w != '*') {
                tok = rt_intern_find(&m->in, w, wl);
                if (tok == RT_WORD_NONE)
                    return 0;
            } else {
                literal_prefix = 0;
            }
            if (++words > m->max_words)
                return 0;
            if (literal_prefix) {
                const rt_node *n;
                uint32_t slot;
                if (ref & RT_LEAF)
                    return 0; /* the binding there has no more words */
                n = rt_node_at(s, ref);
                slot = rt_kid_find(rt_kid_words(n), rt_nkids(n), tok);
                if (slot == RT_NONE)
                    return 0;
                ref = rt_kid_refs(n)[slot];
            }
            p->t[p->n++] = tok;
            hash_run = 0;
        }
        if (!dot)
            break;
        w = dot + 1;
    }
    *prefix = literal_prefix ? ref : RT_NONE;
    normalize(p);
    return 1;
}

static void reverse_pattern(pattern *p)
{
    uint32_t i;
    for (i = 0; i < p->n / 2; i++) {
        uint32_t x = p->t[i];
        p->t[i] = p->t[p->n - 1 - i];
        p->t[p->n - 1 - i] = x;
    }
    normalize(p);
}

static uint32_t count_lits(const pattern *p, uint32_t from, uint32_t to)
{
    uint32_t i, k = 0;
    for (i = from; i < to; i++)
        k += p->t[i] != TOK_STAR && p->t[i] != TOK_HASH;
    return k;
}

/* RT_AUTO: walk the reversed-key trie when the query is better anchored at its end. */
static int prefer_reversed(const pattern *p)
{
    uint32_t first = p->n, last = p->n, i;
    int has_hash = 0;
    for (i = 0; i < p->n; i++)
        if (p->t[i] == TOK_HASH) {
            if (!has_hash)
                first = i;
            last = i;
            has_hash = 1;
        }
    if (!has_hash) {
        /* Fixed length: compare the literal runs before the first and after the last '*'. */
        uint32_t lead = 0, trail = 0;
        while (lead < p->n && p->t[lead] != TOK_STAR)
            lead++;
        while (trail < p->n && p->t[p->n - 1 - trail] != TOK_STAR)
            trail++;
        return trail > lead;
    }
    return count_lits(p, last + 1, p->n) > count_lits(p, 0, first);
}

/* ------------------------------------------------------------------------- NFA stage */

typedef struct {
    uint32_t word;
    uint64_t mask[MAX_SET_WORDS];
} lit_mask;

typedef struct {
    const pattern *p;
    uint32_t nw; /* 64-bit words per position set */
    uint32_t final_hash; /* position of a trailing '#', or RT_NONE */
    uint64_t star[MAX_SET_WORDS], hash[MAX_SET_WORDS];
    uint32_t nlits;
    lit_mask lits[MAX_TOKENS]; /* the distinct literals, sorted by word */
} nfa;

static int has_bit(const uint64_t *set, uint32_t pos)
{
    return (int)((set[pos >> 6] >> (pos & 63)) & 1);
}

static void set_bit(uint64_t *set, uint32_t pos)
{
    set[pos >> 6] |= (uint64_t)1 << (pos & 63);
}

static void nfa_init(nfa *a, const pattern *p, uint32_t from)
{
    uint32_t i, j;
    memset(a->star, 0, sizeof a->star);
    memset(a->hash, 0, sizeof a->hash);
    a->nlits = 0;
    a->p = p;
    a->nw = (p->n + 1 + 63) / 64;
    a->final_hash = p->n && p->t[p->n - 1] == TOK_HASH ? p->n - 1 : RT_NONE;
    for (i = from; i < p->n; i++) {
        uint32_t t = p->t[i];
        if (t == TOK_STAR) {
            set_bit(a->star, i);
        } else if (t == TOK_HASH) {
            set_bit(a->hash, i);
        } else {
            for (j = 0; j < a->nlits && a->lits[j].word != t; j++)
                ;
            if (j == a->nlits) {
                /* Keep the list sorted by word for the binary search in lit_of. */
                while (j > 0 && a->lits[j - 1].word > t) {
                    a->lits[j] = a->lits[j - 1];
                    j--;
                }
                memset(&a->lits[j], 0, sizeof a->lits[j]);
                a->lits[j].word = t;
                a->nlits++;
            }
            set_bit(a->lits[j].mask, i);
        }
    }
}

static const uint64_t *lit_of(const nfa *a, uint32_t w)
{
    uint32_t lo = 0, hi = a->nlits;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (a->lits[mid].word < w)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < a->nlits && a->lits[lo].word == w ? a->lits[lo].mask : NULL;
}

/* Positions after reading word w from the positions in set; returns 0 if none is left. */
static int nfa_step(const nfa *a, const uint64_t *set, uint32_t w, uint64_t *next)
{
    const uint64_t *lit = lit_of(a, w);
    uint64_t carry = 0, hcarry = 0, any = 0;
    uint32_t k;
    for (k = 0; k < a->nw; k++) {
        uint64_t adv = set[k] & (a->star[k] | (lit ? lit[k] : 0));
        uint64_t s = (set[k] & a->hash[k]) | (adv << 1) | carry;
        carry = adv >> 63;
        next[k] = s;
    }
    /* A '#' may match zero words: its position implies the next one ('#' is never followed
     * by another '#', so one step of closure is enough). */
    for (k = 0; k < a->nw; k++) {
        uint64_t h = next[k] & a->hash[k];
        next[k] |= (h << 1) | hcarry;
        hcarry = h >> 63;
        any |= next[k];
    }
    return any != 0;
}

/* What a walk needs besides the pattern. */
typedef struct {
    const rt_store *s;
    rt_queue *q;
    rt_ids *levels; /* two scratch lists */
    rt_ids *out;
} walk_ctx;

/*
 * Stage 3, breadth first from the node reached by the tokens before the first '#' (at
 * position h). The queue holds (record ref, position set) entries, stride 1 + 2 * nw uint32;
 * records are prefetched RT_PREFETCH_AHEAD entries before they are read. A trailing '#' needs
 * no special case: once its position is in a set it stays, and accepts every node below.
 */
static int nfa_walk(const walk_ctx *c, const nfa *a, uint32_t h, uint32_t ref)
{
    const rt_store *s = c->s;
    rt_queue *q = c->q;
    const uint32_t stride = 1 + 2 * a->nw, accept = a->p->n;
    uint64_t set[MAX_SET_WORDS] = {0}, next[MAX_SET_WORDS];
    size_t head = 0, tail = 0;
    if (ref & RT_LEAF)
        return RT_OK;
    set_bit(set, h);
    set_bit(set, h + 1);
    if (q->cap < 64 * stride) { /* capacities stay powers of two, as the ring needs */
        rt_queue_trim(q, 0);
        q->buf = malloc(1024 * sizeof *q->buf);
        if (!q->buf)
            return RT_ENOMEM;
        q->cap = 1024;
    }
    q->buf[tail] = ref;
    memcpy(q->buf + tail + 1, set, a->nw * sizeof *set);
    tail += stride;
    while (head != tail) {
        const rt_node *n = rt_node_at(s, q->buf[head]);
        const uint32_t *words = rt_kid_words(n), *refs = rt_kid_refs(n);
        uint32_t k = rt_nkids(n), i;
        memcpy(set, q->buf + head + 1, a->nw * sizeof *set);
        head += stride;
        if (tail - head > RT_PREFETCH_AHEAD * stride) {
            const rt_node *later = rt_node_at(s, q->buf[head + RT_PREFETCH_AHEAD * stride]);
            RT_PREFETCH(later);
            RT_PREFETCH(later + 16);
        }
        if (has_bit(set, accept) && n[0] != RT_NONE && rt_ids_push(c->out, n[0]) != RT_OK)
            return RT_ENOMEM;
        for (i = 0; i < k; i++) {
            uint32_t r = refs[i];
            if (!nfa_step(a, set, words[i], next))
                continue;
            if (r & RT_LEAF) {
                if (has_bit(next, accept) && rt_ids_push(c->out, r & ~RT_LEAF) != RT_OK)
                    return RT_ENOMEM;
                continue;
            }
            if (tail + stride > q->cap) {
                /* Slide the pending entries to the front, or grow. */
                if (head >= q->cap / 2) {
                    memmove(q->buf, q->buf + head, (tail - head) * sizeof *q->buf);
                } else {
                    uint32_t *b = realloc(q->buf, q->cap * 2 * sizeof *b);
                    if (!b)
                        return RT_ENOMEM;
                    q->buf = b;
                    q->cap *= 2;
                    memmove(q->buf, q->buf + head, (tail - head) * sizeof *q->buf);
                }
                tail -= head;
                head = 0;
            }
            q->buf[tail] = r;
            memcpy(q->buf + tail + 1, next, a->nw * sizeof *next);
            tail += stride;
        }
    }
    return RT_OK;
}

/* ------------------------------------------------------------------------- stages 1, 2 */

/* What matches at a node reached by the tokens before the first '#' (h of them). */
static int reached(const walk_ctx *c, const pattern *p, const nfa *a, uint32_t h, uint32_t ref)
{
    if (h == p->n) { /* no '#': the binding ending exactly here */
        uint32_t id = ref & RT_LEAF ? ref & ~RT_LEAF : rt_node_at(c->s, ref)[0];
        return id == RT_NONE ? RT_OK : rt_ids_push(c->out, id);
    }
    if (h + 1 == p->n)
        return rt_trie_emit_subtree(c->s, ref, c->out, c->q);
    if (ref & RT_LEAF)
        return RT_OK; /* a literal or '*' still has to match below */
    return nfa_walk(c, a, h, ref);
}

/* Stage 1, level by level: the refs reached after d tokens are in one list while the next
 * level's are gathered in the other; a record is prefetched when it is gathered (the first
 * few of a level) or RT_PREFETCH_AHEAD places before it is read, so the misses of a level
 * overlap. Then stages 2 and 3 from each ref of level h. */
static int walk(const walk_ctx *c, uint32_t root, const pattern *p, nfa *a)
{
    const rt_store *s = c->s;
    rt_ids *lv = c->levels;
    uint32_t h = 0, d;
    size_t i;
    while (h < p->n && p->t[h] != TOK_HASH)
        h++;
    if (h + 1 < p->n)
        nfa_init(a, p, h);
    lv[0].len = 0;
    if (rt_ids_push(&lv[0], root) != RT_OK)
        return RT_ENOMEM;
    for (d = 0; d < h; d++) {
        rt_ids *from = &lv[d & 1], *to = &lv[(d + 1) & 1];
        uint32_t tok = p->t[d];
        int last = d + 1 == h;
        to->len = 0;
        for (i = 0; i < from->len; i++) {
            const rt_node *n;
            const uint32_t *refs;
            uint32_t k, j;
            if (i + RT_PREFETCH_AHEAD < from->len)
                rt_prefetch(s, from->ids[i + RT_PREFETCH_AHEAD]);
            n = rt_node_at(s, from->ids[i]);
            refs = rt_kid_refs(n);
            k = rt_nkids(n);
            if (tok == TOK_STAR) {
                if (rt_ids_reserve(to, k) != RT_OK)
                    return RT_ENOMEM;
                for (j = 0; j < k; j++)
                    if (last || !(refs[j] & RT_LEAF)) { /* a leaf cannot take one more word */
                        to->ids[to->len++] = refs[j];
                        if (to->len <= RT_PREFETCH_AHEAD)
                            rt_prefetch(s, refs[j]);
                    }
            } else {
                j = rt_kid_find(rt_kid_words(n), k, tok);
                if (j != RT_NONE && (last || !(refs[j] & RT_LEAF))) {
                    if (rt_ids_push(to, refs[j]) != RT_OK)
                        return RT_ENOMEM;
                    if (to->len <= RT_PREFETCH_AHEAD)
                        rt_prefetch(s, refs[j]);
                }
            }
        }
    }
    {
        const rt_ids *at = &lv[h & 1];
        for (i = 0; i < at->len; i++) {
            if (i + RT_PREFETCH_AHEAD < at->len)
                rt_prefetch(s, at->ids[i + RT_PREFETCH_AHEAD]);
            if (reached(c, p, a, h, at->ids[i]) != RT_OK)
                return RT_ENOMEM;
        }
    }
    return RT_OK;
}

int rt_match_reverse(rt_matcher *m, const char *q, size_t len, rt_direction dir, rt_ids *out)
{
    pattern p;
    nfa a;
    walk_ctx c;
    uint32_t i, hashes = 0, prefix;
    int reversed;
    if (m->count == 0 || !tokenize(m, q, len, &p, &prefix))
        return RT_OK;
    if (prefix != RT_NONE) { /* no wildcard: the exact key */
        uint32_t id = prefix & RT_LEAF ? prefix & ~RT_LEAF : rt_node_at(&m->store, prefix)[0];
        return id == RT_NONE ? RT_OK : rt_ids_push(out, id);
    }
    for (i = 0; i < p.n; i++)
        hashes += p.t[i] == TOK_HASH;
    if (hashes == 0 && m->len_count[p.n] == 0)
        return RT_OK; /* no binding has this many words */
    if (dir == RT_AUTO)
        reversed = prefer_reversed(&p);
    else
        reversed = dir == RT_DIR_REVERSED;
    if (reversed)
        reverse_pattern(&p);
    c.s = &m->store;
    c.q = &m->queue;
    c.levels = m->levels;
    c.out = out;
    return walk(&c, reversed ? m->rroot : m->root, &p, &a);
}

/* ------------------------------------------------------------------ batches of exact keys */

/*
 * In a batch, exact keys (no wildcard) are looked up GROUP at a time, level by level, with
 * each query's next record prefetched while the others advance: at a million bindings a
 * record is usually a cache miss, and this way the misses of a group overlap instead of
 * queueing one after another. Queries with wildcards go through rt_match_reverse, in order.
 */
#define GROUP 16

typedef struct {
    uint32_t ref; /* where the words so far lead; RT_NONE: nothing matches */
    uint32_t nw;
    int general; /* holds a wildcard, or is too long: rt_match_reverse answers it */
    uint32_t words[RT_MAX_WORDS];
} exact_query;

static void exact_prepare(const rt_matcher *m, const char *q, size_t len, exact_query *e)
{
    const char *w = q, *end = q + len;
    e->general = 0;
    e->nw = 0;
    e->ref = m->root;
    if (len > RT_MAX_QUERY_BYTES) {
        e->general = 1;
        return;
    }
    if (len == 0)
        return;
    for (;;) {
        const char *dot = memchr(w, '.', (size_t)(end - w));
        const char *x = dot ? dot : end;
        size_t wl = (size_t)(x - w);
        uint32_t id;
        if (wl == 1 && (*w == '*' || *w == '#')) {
            e->general = 1;
            return;
        }
        /* A word no binding holds, or more words than the longest binding: no match,
         * whatever follows. */
        if (e->nw == m->max_words || (id = rt_intern_find(&m->in, w, wl)) == RT_WORD_NONE) {
            e->ref = RT_NONE;
            return;
        }
        e->words[e->nw++] = id;
        if (!dot)
            return;
        w = dot + 1;
    }
}

int rt_match_reverse_batch(rt_matcher *m, const char *buf, const size_t *offs, size_t n,
                           rt_ids *out, size_t *res_offs)
{
    exact_query g[GROUP];
    size_t base, j;
    for (base = 0; base < n; base += GROUP) {
        size_t k = n - base < GROUP ? n - base : GROUP;
        uint32_t d, maxw = 0;
        for (j = 0; j < k; j++) {
            exact_prepare(m, buf + offs[base + j], offs[base + j + 1] - offs[base + j], &g[j]);
            if (!g[j].general && g[j].ref != RT_NONE && g[j].nw > maxw)
                maxw = g[j].nw;
        }
        for (d = 0; d < maxw; d++) {
            for (j = 0; j < k; j++) {
                exact_query *e = &g[j];
                const rt_node *nd;
                uint32_t slot;
                if (e->general || e->ref == RT_NONE || d >= e->nw)
                    continue;
                if (e->ref & RT_LEAF) {
                    e->ref = RT_NONE;
                    continue;
                }
                nd = rt_node_at(&m->store, e->ref);
                slot = rt_kid_find(rt_kid_words(nd), rt_nkids(nd), e->words[d]);
                if (slot == RT_NONE) {
                    e->ref = RT_NONE;
                    continue;
                }
                e->ref = rt_kid_refs(nd)[slot];
                if (!(e->ref & RT_LEAF)) {
                    const rt_node *next = rt_node_at(&m->store, e->ref);
                    RT_PREFETCH(next);
                    RT_PREFETCH(next + 16);
                }
            }
        }
        for (j = 0; j < k; j++) {
            exact_query *e = &g[j];
            res_offs[base + j] = out->len;
            if (e->general) {
                size_t from = offs[base + j];
                size_t len = offs[base + j + 1] - from;
                int rc = len > RT_MAX_QUERY_BYTES ? RT_ETOOLONG
                                                  : rt_match_reverse(m, buf + from, len, RT_AUTO, out);
                if (rc != RT_OK)
                    return rc;
            } else if (e->ref != RT_NONE) {
                uint32_t id = e->ref & RT_LEAF ? e->ref & ~RT_LEAF
                                               : rt_node_at(&m->store, e->ref)[0];
                if (id != RT_NONE && rt_ids_push(out, id) != RT_OK)
                    return RT_ENOMEM;
            }
        }
    }
    res_offs[n] = out->len;
    return RT_OK;
}
