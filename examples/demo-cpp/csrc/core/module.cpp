// Python module demo_cpp._core.
#include "demo_cpp/bindings.h"

DC_DEFINE_MODULE(_core, "core", "demo-cpp: generated TUs of group 'core' behind a dispatcher")
