/*
 * The node store and the trie operations shared by every matcher kind.
 *
 * A trie edge is labelled by an interned word id. A node is one contiguous record of uint32:
 *     binding | kid count and capacity class | kid words [cap] | kid refs [cap]
 * with the kids sorted by word id, so that a lookup reads one record (the binary search runs
 * over the packed words, then one ref is read next to them). A kid ref is either a record ref
 * or, with RT_LEAF set, directly the id of a binding that ends there and has nothing below it,
 * so leaves cost no record. Canonical form: every non-root node has at least one kid.
 *
 * Records of capacity 1, 2, 4 ... 128 live in 16 KiB arena chunks, with one free list per
 * capacity class; bigger ones are malloc'd on their own and take a chunk-table slot of their
 * own, so a record ref is always (chunk << RT_CHUNK_BITS | offset) and resolves without a
 * branch. A record moves only when its capacity changes (the parent's ref is then updated),
 * never during a lookup, so walkers may hold pointers while they answer a query.
 */
#ifndef RT_TRIE_H
#define RT_TRIE_H

#include <stddef.h>
#include <stdint.h>

#include "intern.h"
#include "rtroute.h"

#define RT_NONE UINT32_MAX
#define RT_LEAF 0x80000000u    /* kid ref flag: the low bits are a binding id */
#define RT_MAX_WORDS 128u      /* a 255-byte binding key has at most 128 words */
#define RT_MAX_IDS 0x7fffffffu /* binding ids stay below RT_LEAF */

#define RT_CHUNK_BITS 12u
#define RT_CHUNK (1u << RT_CHUNK_BITS) /* uint32 per arena chunk */
#define RT_MAX_CHUNKS (RT_LEAF >> RT_CHUNK_BITS)
#define RT_SMALL_CLASSES 8u /* capacities 1 .. 128 come from the arena */
#define RT_CLASS_SHIFT 27u
#define RT_NKIDS_MASK ((1u << RT_CLASS_SHIFT) - 1)

/* A node record: rt_node[0] binding id or RT_NONE, rt_node[1] kid count | class << 27. */
typedef uint32_t rt_node;

typedef struct {
    uint32_t **chunks;  /* arena chunks and big records, indexed by chunk number */
    uint32_t *chunk_len; /* uint32 held by each chunk-table entry; 0 when the slot is free */
    uint32_t n_chunks, chunks_cap;
    uint32_t *slot_free; /* chunk-table slots to reuse */
    uint32_t n_slot_free, slot_free_cap;
    uint32_t cur, cur_top; /* bump allocation in arena chunk cur (RT_NONE: none yet) */
    uint32_t class_free[RT_SMALL_CLASSES]; /* free records, linked through their first slot */
    size_t arena_chunks; /* arena chunks allocated */
    size_t arena_live;   /* uint32 in arena records handed out */
    size_t big_bytes;    /* bytes in big records */
    size_t records;      /* live records */
} rt_store;

static inline const rt_node *rt_node_at(const rt_store *s, uint32_t ref)
{
    return s->chunks[ref >> RT_CHUNK_BITS] + (ref & (RT_CHUNK - 1));
}

static inline uint32_t rt_nkids(const rt_node *n)
{
    return n[1] & RT_NKIDS_MASK;
}

static inline uint32_t rt_node_cap(const rt_node *n)
{
    return 1u << (n[1] >> RT_CLASS_SHIFT);
}

/* The kid words and kid refs of a node (each rt_nkids long). */
static inline const uint32_t *rt_kid_words(const rt_node *n)
{
    return n + 2;
}

static inline const uint32_t *rt_kid_refs(const rt_node *n)
{
    return n + 2 + rt_node_cap(n);
}

#if defined(__GNUC__)
#define RT_PREFETCH(p) __builtin_prefetch(p)
#else
#define RT_PREFETCH(p) ((void)(p))
#endif

/* How many records ahead a walk that visits them all asks for them. */
#define RT_PREFETCH_AHEAD 16u

/* Starts loading the record of kid ref ref (nothing for a leaf): its first three cache lines,
 * which hold all of a small record and the words and first refs of a 32-kid one. */
static inline void rt_prefetch(const rt_store *s, uint32_t ref)
{
    if (!(ref & RT_LEAF)) {
        const rt_node *n = rt_node_at(s, ref);
        RT_PREFETCH(n);
        RT_PREFETCH(n + 16);
        RT_PREFETCH(n + 32);
    }
}

/* Slot of word w among the n sorted words, or RT_NONE. Branch-free halving: the compares
 * of a lookup are unpredictable, the loads are cheap. */
static inline uint32_t rt_kid_find(const uint32_t *words, uint32_t n, uint32_t w)
{
    const uint32_t *base = words;
    if (n == 0)
        return RT_NONE;
    while (n > 1) {
        uint32_t half = n / 2;
        base = base[half] <= w ? base + half : base;
        n -= half;
    }
    return *base == w ? (uint32_t)(base - words) : RT_NONE;
}

void rt_store_init(rt_store *s);
void rt_store_free(rt_store *s);
size_t rt_store_memory(const rt_store *s);
/* A new empty node (a root); RT_NONE on allocation failure. */
uint32_t rt_store_new_root(rt_store *s);
/* Is most of the arena free, so that compacting would give memory back? */
int rt_store_sparse(const rt_store *s);

/* Binding id stored under the exact word path, or RT_NONE. */
uint32_t rt_trie_find(const rt_store *s, uint32_t root, const uint32_t *words, uint32_t nw);

/*
 * Insertion runs in two steps so that a failure changes nothing: rt_trie_plan walks the
 * existing path and allocates every record the insertion needs, then rt_trie_commit (which
 * cannot fail) links the binding in, or rt_trie_cancel gives the records back. Plans for
 * different tries of one store may be made before either is committed.
 */
typedef struct {
    int state;      /* PLAN_* in trie.c */
    uint32_t *loc;  /* where the ref to node is stored: a parent's kid ref, or the root */
    uint32_t depth; /* words[0..depth) lead to node */
    uint32_t slot;  /* the leaf kid that becomes a node (PLAN_MATERIALIZE) */
    uint32_t grown; /* bigger record for node, to take one more kid, or RT_NONE */
    uint32_t nchain; /* new records for the nodes of words[depth + 1 ..) */
    uint32_t chain[RT_MAX_WORDS];
    uint32_t existing; /* id of the binding already there, or RT_NONE */
} rt_plan;

/* RT_OK (plan->existing != RT_NONE if the key is bound already) or RT_ENOMEM. */
int rt_trie_plan(rt_store *s, uint32_t *root, const uint32_t *words, uint32_t nw, rt_plan *plan);
void rt_trie_commit(rt_store *s, rt_interner *in, const rt_plan *plan, const uint32_t *words,
                    uint32_t nw, uint32_t id);
void rt_trie_cancel(rt_store *s, rt_plan *plan);

/* Unlinks the binding at the word path; returns its id or RT_NONE if absent. Cannot fail. */
uint32_t rt_trie_remove(rt_store *s, rt_interner *in, uint32_t *root, const uint32_t *words,
                        uint32_t nw);

/* Scratch FIFO of record refs for breadth-first walks (owned by the matcher, reused). */
typedef struct {
    uint32_t *buf;
    size_t cap; /* a power of two, or 0 */
} rt_queue;

void rt_queue_trim(rt_queue *q, size_t keep); /* frees the buffer if larger than keep */

/* Appends every binding at or below kid ref ref (a record or an RT_LEAF binding).
 * Breadth first, the queue giving the addresses of the records to come well before they are
 * read, so their cache misses overlap: it does not matter much how the records lie. */
int rt_trie_emit_subtree(const rt_store *s, uint32_t ref, rt_ids *out, rt_queue *q);

/* Copies the trie at root into dst in depth-first order with tight records; RT_NONE on
 * allocation failure (dst then holds a partial copy the caller frees). */
uint32_t rt_trie_copy(rt_store *dst, const rt_store *src, uint32_t root);

#endif
