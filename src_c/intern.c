#include "intern.h"

#include <stdlib.h>
#include <string.h>

#include "rtroute.h"
#include "alloc.h"

#define MIN_SLOTS 16u
#define MAX_WORDS 0x7fffffffu

/* Reads n <= 8 bytes into a word without a variable-length memcpy (a libc call). */
static inline uint64_t load_tail(const unsigned char *p, size_t n)
{
    uint32_t lo, hi;
    if (n >= 4) { /* two overlapping 4-byte loads cover 4..8 bytes */
        memcpy(&lo, p, 4);
        memcpy(&hi, p + n - 4, 4);
        return ((uint64_t)hi << 32) | lo;
    }
    if (n == 0)
        return 0;
    return ((uint64_t)p[0] << 16) | ((uint64_t)p[n / 2] << 8) | p[n - 1];
}

static inline uint32_t hash_bytes(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)n * 0xff51afd7ed558ccdull);
    while (n > 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    h = (h ^ load_tail(p, n)) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 32;
    return (uint32_t)h;
}

#define SLOT(h, id) (((uint64_t)(h) << 32) | ((uint64_t)(id) + 1))
#define SLOT_ID(v) ((uint32_t)(v) - 1)
#define SLOT_HASH(v) ((uint32_t)((v) >> 32))

/* Word id's bytes equal s[0..len) (its hash and length already match). */
static inline int same_bytes(const rt_interner *in, uint32_t id, const char *s, size_t len)
{
    const rt_word *w = &in->words[id];
    const char *b = in->pool + w->off;
    if (w->len != len)
        return 0;
    if (len <= 8) /* load_tail reads every byte of a short word: equal values, equal words */
        return load_tail((const unsigned char *)b, len) == load_tail((const unsigned char *)s, len);
    return memcmp(b, s, len) == 0;
}

/* The slot holding word s, or the empty slot where it would go. */
static inline uint32_t probe(const rt_interner *in, const char *s, size_t len, uint32_t h)
{
    uint32_t i = h & in->slots_mask;
    for (;;) {
        uint64_t v = in->slots[i];
        if (v == 0 || (SLOT_HASH(v) == h && same_bytes(in, SLOT_ID(v), s, len)))
            return i;
        i = (i + 1) & in->slots_mask;
    }
}

static void slots_put(uint64_t *slots, uint32_t mask, uint32_t id, uint32_t h)
{
    uint32_t i = h & mask;
    while (slots[i] != 0)
        i = (i + 1) & mask;
    slots[i] = SLOT(h, id);
}

static int slots_resize(rt_interner *in, uint32_t nslots)
{
    uint64_t *slots = calloc(nslots, sizeof *slots);
    uint32_t id;
    if (!slots)
        return RT_ENOMEM;
    for (id = 0; id < in->nwords; id++)
        if (in->words[id].len != RT_WORD_NONE)
            slots_put(slots, nslots - 1, id, in->words[id].hash);
    free(in->slots);
    in->slots = slots;
    in->slots_mask = nslots - 1;
    return RT_OK;
}

static int add_raw(rt_interner *in, const char *s, size_t len, uint32_t h, uint32_t *out)
{
    uint32_t id;
    rt_word *w;
    if ((size_t)(in->live + 1) * 2 > (size_t)in->slots_mask + 1) {
        if (in->slots_mask >= 0x7fffffffu || slots_resize(in, (in->slots_mask + 1) * 2) != RT_OK)
            return RT_ENOMEM;
    }
    if (in->pool_len + len > in->pool_cap) {
        size_t cap = in->pool_cap ? in->pool_cap : 256;
        char *pool;
        while (cap < in->pool_len + len)
            cap *= 2;
        if (cap > UINT32_MAX)
            return RT_ENOMEM;
        pool = realloc(in->pool, cap);
        if (!pool)
            return RT_ENOMEM;
        in->pool = pool;
        in->pool_cap = cap;
    }
    if (in->free_head != RT_WORD_NONE) {
        id = in->free_head;
        in->free_head = in->words[id].off;
    } else {
        if (in->nwords >= MAX_WORDS)
            return RT_ENOMEM;
        if (in->nwords == in->words_cap) {
            uint32_t cap = in->words_cap ? in->words_cap * 2 : 16;
            rt_word *words = realloc(in->words, (size_t)cap * sizeof *words);
            if (!words)
                return RT_ENOMEM;
            in->words = words;
            in->words_cap = cap;
        }
        id = in->nwords++;
    }
    w = &in->words[id];
    w->off = (uint32_t)in->pool_len;
    w->len = (uint32_t)len;
    w->refs = 0;
    w->hash = h;
    if (len)
        memcpy(in->pool + in->pool_len, s, len);
    in->pool_len += len;
    in->live++;
    slots_put(in->slots, in->slots_mask, id, h);
    *out = id;
    return RT_OK;
}

int rt_intern_init(rt_interner *in)
{
    uint32_t id;
    memset(in, 0, sizeof *in);
    in->free_head = RT_WORD_NONE;
    in->slots = calloc(MIN_SLOTS, sizeof *in->slots);
    if (!in->slots)
        return RT_ENOMEM;
    in->slots_mask = MIN_SLOTS - 1;
    if (add_raw(in, "*", 1, hash_bytes("*", 1), &id) != RT_OK ||
        add_raw(in, "#", 1, hash_bytes("#", 1), &id) != RT_OK) {
        rt_intern_free(in);
        return RT_ENOMEM;
    }
    return RT_OK;
}

void rt_intern_free(rt_interner *in)
{
    free(in->words);
    free(in->slots);
    free(in->pool);
    memset(in, 0, sizeof *in);
}

uint32_t rt_intern_find(const rt_interner *in, const char *s, size_t len)
{
    uint64_t v = in->slots[probe(in, s, len, hash_bytes(s, len))];
    return v ? SLOT_ID(v) : RT_WORD_NONE;
}

int rt_intern_add(rt_interner *in, const char *s, size_t len, uint32_t *id, int *created)
{
    uint32_t h = hash_bytes(s, len);
    uint64_t v = in->slots[probe(in, s, len, h)];
    if (v) {
        *id = SLOT_ID(v);
        *created = 0;
        return RT_OK;
    }
    *created = 1;
    return add_raw(in, s, len, h, id);
}

void rt_intern_ref(rt_interner *in, uint32_t id)
{
    in->words[id].refs++;
}

/* Rewrites the pool without the bytes of freed words once they are most of it. */
static void pool_compact(rt_interner *in)
{
    size_t need = in->pool_len - in->pool_dead, cap = 256, len = 0;
    char *pool;
    uint32_t id;
    while (cap < need)
        cap *= 2;
    pool = malloc(cap);
    if (!pool)
        return; /* keep the old pool: still correct, only larger */
    for (id = 0; id < in->nwords; id++) {
        rt_word *w = &in->words[id];
        if (w->len == RT_WORD_NONE)
            continue;
        if (w->len)
            memcpy(pool + len, in->pool + w->off, w->len);
        w->off = (uint32_t)len;
        len += w->len;
    }
    free(in->pool);
    in->pool = pool;
    in->pool_len = len;
    in->pool_cap = cap;
    in->pool_dead = 0;
}

static void slot_delete(rt_interner *in, uint32_t id)
{
    uint32_t mask = in->slots_mask, i = in->words[id].hash & mask, j;
    while (SLOT_ID(in->slots[i]) != id || in->slots[i] == 0)
        i = (i + 1) & mask;
    /* Backward-shift deletion keeps every probe chain unbroken without tombstones. */
    j = i;
    for (;;) {
        uint32_t home;
        j = (j + 1) & mask;
        if (in->slots[j] == 0)
            break;
        home = SLOT_HASH(in->slots[j]) & mask;
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        in->slots[i] = in->slots[j];
        i = j;
    }
    in->slots[i] = 0;
}

static void word_free(rt_interner *in, uint32_t id)
{
    rt_word *w = &in->words[id];
    slot_delete(in, id);
    in->pool_dead += w->len;
    w->len = RT_WORD_NONE;
    w->off = in->free_head;
    in->free_head = id;
    in->live--;
    if (in->live == 2) {
        /* Only the reserved words are left: give back everything else. */
        char *pool = realloc(in->pool, 256);
        rt_word *words = realloc(in->words, 16 * sizeof *words);
        if (pool) {
            in->pool = pool;
            in->pool_cap = 256;
        }
        if (words) {
            in->words = words;
            in->words_cap = 16;
        }
        in->pool_len = 2;
        in->pool_dead = 0;
        in->nwords = 2;
        in->free_head = RT_WORD_NONE;
    } else if (in->pool_dead > 4096 && in->pool_dead * 2 > in->pool_len) {
        pool_compact(in);
    }
    if (in->slots_mask + 1 > MIN_SLOTS && (size_t)in->live * 8 < (size_t)in->slots_mask + 1)
        (void)slots_resize(in, (in->slots_mask + 1) / 2); /* on failure the table stays larger */
}

void rt_intern_unref(rt_interner *in, uint32_t id)
{
    if (id <= RT_WORD_HASH)
        return;
    if (--in->words[id].refs == 0)
        word_free(in, id);
}

void rt_intern_release_unused(rt_interner *in, uint32_t id)
{
    if (id > RT_WORD_HASH && in->words[id].refs == 0)
        word_free(in, id);
}

size_t rt_intern_memory(const rt_interner *in)
{
    return (size_t)in->words_cap * sizeof(rt_word) + ((size_t)in->slots_mask + 1) * sizeof(uint64_t) +
           in->pool_cap;
}
