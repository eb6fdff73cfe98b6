# cimported by _m7 only: a change here must miss for _m7 and for nothing else.
cdef inline long weight() noexcept:
    return 5
