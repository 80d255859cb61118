## A cast (codegen.ckernels._astype); f: size, ctype.
  for (int i = 0; i < ${f["size"]}; ++i) y[i] = (${f["ctype"]})x[i];
