## Average pooling, NHWC or NCHW, unpadded (codegen.ckernels.lower_avg_pool2d): integer sums
## divide rounding half away from zero, as TFLite does (and edgebyoc's host build), float sums
## divide. With rows (NHWC): output rows y0..y1 - 1 through buffers of rows["x"] / rows["y"].
<%
    c = f["c"]
    def at(h, w, ny, nx, ring=0):
        if f["layout"] == "NHWC":
            return f"((n * {ny} + {row(h, ring)}) * {nx} + {w}) * {c} + k"
        return f"((n * {c} + k) * {ny} + {h}) * {nx} + {w}"
    rx, ry = (rows or {}).get("x", 0), (rows or {}).get("y", 0)
    window = f["fy"] * f["fx"]
    mean = f"sum / {window}" if f["acc"] == "float" else f"edgebyoc_round_div(sum, {window})"
%>\
  for (int n = 0; n < ${f["n"]}; ++n)
% if rows is None:
  for (int oy = 0; oy < ${f["oy"]}; ++oy)
% else:
  for (int oy = y0; oy < y1; ++oy)
% endif
  for (int ox = 0; ox < ${f["ox"]}; ++ox)
  for (int k = 0; k < ${c}; ++k) {
    ${f["acc"]} sum = 0;
    for (int fy = 0; fy < ${f["fy"]}; ++fy)
      for (int fx = 0; fx < ${f["fx"]}; ++fx)
        sum += x[${at(f"oy * {f['sy']} + fy", f"ox * {f['sx']} + fx", f["iy"], f["ix"], rx)}];
    y[${at("oy", "ox", f["oy"], f["ox"], ry)}] = (${f["ctype"]})(${mean});
  }
