// <immintrin.h> for weft's AVX-512 code. GCC 12's AVX-512 headers start some intrinsics (the
// broadcasts) from _mm512_undefined_ps(), which -Wuninitialized reports wherever they are inlined
// (GCC bug 105593, fixed in GCC 13); the diagnostic is keyed to the header's lines, so silencing it
// around the include covers every use. Nothing is included without AVX-512.
#pragma once

#ifdef __AVX512F__
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
