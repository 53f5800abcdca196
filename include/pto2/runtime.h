// taskring's runtime.h: some of Simpler's orchestration sources include the runtime's
// runtime.h beside pto_orchestration_api.h without using anything of it; taskring's
// runtime lives in Rust, so this only brings in the orchestration API.
#pragma once

#include "pto_orchestration_api.h"
