/* Growth of the caller-owned result arrays (rt_ids). */
#ifndef RT_IDS_H
#define RT_IDS_H

#include "rtroute.h"

/* Makes room for extra more ids: RT_OK or RT_ENOMEM (out unchanged). */
int rt_ids_reserve(rt_ids *out, size_t extra);

static inline int rt_ids_push(rt_ids *out, uint32_t id)
{
    if (out->len == out->cap && rt_ids_reserve(out, 1) != RT_OK)
        return RT_ENOMEM;
    out->ids[out->len++] = id;
    return RT_OK;
}

#endif
