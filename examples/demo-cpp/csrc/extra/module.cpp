// Python module demo_cpp._extra.
#include "demo_cpp/bindings.h"

DC_DEFINE_MODULE(_extra, "extra", "demo-cpp: generated TUs of group 'extra' behind a dispatcher")
