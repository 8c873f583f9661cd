#include "flashattn.h"
#include "flashattn.h"
int main() { return fa_dtype_size(FA_DTYPE_BF16) == 2 ? 0 : 1; }
