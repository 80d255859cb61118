## weights.c of a C project: every constant once, 16 values a line (codegen.cemit).
#include "weights.h"
% for t, lines in constants:

const ${t.ctype} ${t.name}[${max(t.size, 1)}] __attribute__((aligned(16))) = {
  ${",\n  ".join(lines)}
};
% endfor
