## round(x / scale) + zero_point, saturated (codegen.ckernels._quantize); f: size, scale,
## zero_point, low, high, ctype.
  for (int i = 0; i < ${f["size"]}; ++i) {
    float q = nearbyintf(x[i] / ${f["scale"]}) + ${f["zero_point"]};
    y[i] = (${f["ctype"]})(q < ${f["low"]}.0f ? ${f["low"]}.0f : (q > ${f["high"]}.0f ? ${f["high"]}.0f : q));
  }
