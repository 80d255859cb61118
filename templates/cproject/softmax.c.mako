## Softmax along an axis of n values, outer x inner of them (codegen.ckernels._softmax).
<% n, inner = f["n"], f["inner"] %>\
  for (int o = 0; o < ${f["outer"]}; ++o)
    for (int i = 0; i < ${inner}; ++i) {
      const float* xs = x + o * ${n * inner} + i;
      float* ys = y + o * ${n * inner} + i;
      float top = xs[0], sum = 0.0f;
      for (int j = 1; j < ${n}; ++j) if (xs[j * ${inner}] > top) top = xs[j * ${inner}];
      for (int j = 0; j < ${n}; ++j) { ys[j * ${inner}] = expf(xs[j * ${inner}] - top); sum += ys[j * ${inner}]; }
      for (int j = 0; j < ${n}; ++j) ys[j * ${inner}] = ys[j * ${inner}] / sum;
    }
