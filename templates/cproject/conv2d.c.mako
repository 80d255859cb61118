## NHWC convolution (codegen.ckernels.lower_conv2d): f holds the geometry (n, iy, ix, c, oy,
## ox, k, fy, fx, cg, kg, pt, pl, sy, sx, dy, dx), acc, zero_point (subtracted from each input
## value read), xtype / wtype / ctype, and requantize (None, or bi / mi / si / zp / low / high /
## rounding: each accumulator requantized to int8 instead of stored). With rows: output rows
## y0..y1 - 1, the input's and output's buffers holding rows["x"] / rows["y"] rows.
<%
    rx, ry = (rows or {}).get("x", 0), (rows or {}).get("y", 0)
    acc = f["acc"]
    read = f"(({acc})xp[c] - {f['zero_point']})" if f["zero_point"] else f"({acc})xp[c]"
    q = f["requantize"]
    if q is None:
        store = f"({f['ctype']})acc"
    else:
        store = (f"edgebyoc_clamp_int8(edgebyoc_mbqm((int64_t)acc + bias[{q['bi']}], mult[{q['mi']}], "
                 f"shift[{q['si']}], {q['rounding']}) + {q['zp']}, {q['low']}, {q['high']})")
%>\
  for (int n = 0; n < ${f["n"]}; ++n)
% if rows is None:
  for (int oy = 0; oy < ${f["oy"]}; ++oy)
% else:
  for (int oy = y0; oy < y1; ++oy)
% endif
  for (int ox = 0; ox < ${f["ox"]}; ++ox)
  for (int k = 0; k < ${f["k"]}; ++k) {
    const int g = k / ${f["kg"]};
    ${acc} acc = 0;
    for (int fy = 0; fy < ${f["fy"]}; ++fy) {
      const int iy = oy * ${f["sy"]} - ${f["pt"]} + fy * ${f["dy"]};
      if (iy < 0 || iy >= ${f["iy"]}) continue;
      for (int fx = 0; fx < ${f["fx"]}; ++fx) {
        const int ix = ox * ${f["sx"]} - ${f["pl"]} + fx * ${f["dx"]};
        if (ix < 0 || ix >= ${f["ix"]}) continue;
        const ${f["xtype"]}* xp = x + ((n * ${f["iy"]} + ${row('iy', rx)}) * ${f["ix"]} + ix) * ${f["c"]} + g * ${f["cg"]};
        const ${f["wtype"]}* wp = w + ((k * ${f["fy"]} + fy) * ${f["fx"]} + fx) * ${f["cg"]};
        for (int c = 0; c < ${f["cg"]}; ++c) acc += ${read} * (${acc})wp[c];
      }
    }
    y[((n * ${f["oy"]} + ${row('oy', ry)}) * ${f["ox"]} + ox) * ${f["k"]} + k] = ${store};
  }
