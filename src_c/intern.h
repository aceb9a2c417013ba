/*
 * Word interning: routing-key words (arbitrary bytes) to small dense uint32 ids, so that the
 * tries store and compare integers. Ids 0 and 1 are reserved for the words "*" and "#" and are
 * never freed. Every other word is reference-counted by the trie entries that hold it and is
 * freed (id and bytes reused) when its count drops to zero.
 */
#ifndef RT_INTERN_H
#define RT_INTERN_H

#include <stddef.h>
#include <stdint.h>

#define RT_WORD_STAR 0u
#define RT_WORD_HASH 1u
#define RT_WORD_NONE UINT32_MAX /* "no such word" */

typedef struct {
    uint32_t off;  /* offset of the bytes in the pool; next free id while the entry is unused */
    uint32_t len;  /* byte length, RT_WORD_NONE while the entry is unused */
    uint32_t refs; /* trie entries holding the word */
    uint32_t hash;
} rt_word;

typedef struct {
    rt_word *words;     /* indexed by id */
    uint32_t nwords;    /* ids handed out so far (high-water mark) */
    uint32_t words_cap;
    uint32_t free_head; /* first unused id below nwords, or RT_WORD_NONE */
    uint32_t live;      /* words in use, reserved ones included */
    uint64_t *slots; /* open addressing, linear probing: hash << 32 | (id + 1); 0 when empty */
    uint32_t slots_mask;
    char *pool; /* word bytes, back to back */
    size_t pool_len, pool_cap, pool_dead;
} rt_interner;

int rt_intern_init(rt_interner *in); /* RT_OK or RT_ENOMEM */
void rt_intern_free(rt_interner *in);

/* Id of the word s[0..len), or RT_WORD_NONE if it is not interned. */
uint32_t rt_intern_find(const rt_interner *in, const char *s, size_t len);

/* Id of the word s[0..len), interning it (with zero references) if needed; *created says
 * whether it was new. RT_OK or RT_ENOMEM (then nothing changed). */
int rt_intern_add(rt_interner *in, const char *s, size_t len, uint32_t *id, int *created);

void rt_intern_ref(rt_interner *in, uint32_t id);
/* Drops one reference; the word is freed when none is left. */
void rt_intern_unref(rt_interner *in, uint32_t id);
/* Frees a word that holds no reference (undoing an rt_intern_add that was not used). */
void rt_intern_release_unused(rt_interner *in, uint32_t id);

size_t rt_intern_memory(const rt_interner *in);

#endif
