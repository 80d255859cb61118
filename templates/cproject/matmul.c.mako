## (m x k) by (k x n) (codegen.ckernels._matmul); f: m, k, n, acc, ctype.
<% k, n, acc = f["k"], f["n"], f["acc"] %>\
  for (int i = 0; i < ${f["m"]}; ++i)
    for (int j = 0; j < ${n}; ++j) {
      ${acc} acc = 0;
      for (int p = 0; p < ${k}; ++p) acc += (${acc})a[i * ${k} + p] * (${acc})b[p * ${n} + j];
      y[i * ${n} + j] = (${f["ctype"]})acc;
    }
