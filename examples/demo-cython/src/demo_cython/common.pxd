# Shared by the seven small modules (cimported): a change here must reach all of them.
cdef inline long mix(long a, long b) noexcept:
    return (a * 31 + b) % 1000003
