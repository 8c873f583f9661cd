/* Builds flashattn.h as an ordinary library. */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
