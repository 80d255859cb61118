## (x - zero_point) * scale (codegen.ckernels._dequantize); f: size, scale, zero_point.
  for (int i = 0; i < ${f["size"]}; ++i)
    y[i] = ((float)x[i] - ${f["zero_point"]}) * ${f["scale"]};
