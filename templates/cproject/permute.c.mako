## A transpose (codegen.ckernels._permute); f: shape, index (the input's flat index over the
## output's loop variables), y, mode: "whole", "rows_outer" (NHWC <-> NHCW: inner, last) or
## "planes" (NHWC <-> NCHW: planar_out, height, width, channels). With rows, the band y0..y1 - 1.
% if rows is None or f["mode"] == "whole":
${loop_nest(f["shape"], f"y[{f['y']}] = x[{f['index']}];")}\
% elif f["mode"] == "rows_outer":
<%
    read = f"({row('r', rows.get('x', 0))} * {f['inner']} + a) * {f['last']} + b"
    write = f"({row('r', rows.get('y', 0))} * {f['last']} + b) * {f['inner']} + a"
%>\
  for (int r = y0; r < y1; ++r)
  for (int a = 0; a < ${f["inner"]}; ++a)
  for (int b = 0; b < ${f["last"]}; ++b)
    y[${write}] = x[${read}];
% else:
<%
    rx, ry = rows.get("x", 0), rows.get("y", 0)
    width, channels = f["width"], f["channels"]
    if f["planar_out"]:
        read = f"({row('r', rx)} * {width} + w) * {channels} + c"
        write = f"(c * {ry or f['height']} + {row('r', ry)}) * {width} + w"
    else:
        read = f"(c * {rx or f['height']} + {row('r', rx)}) * {width} + w"
        write = f"({row('r', ry)} * {width} + w) * {channels} + c"
%>\
  for (int r = y0; r < y1; ++r)
  for (int c = 0; c < ${channels}; ++c)
  for (int w = 0; w < ${width}; ++w)
    y[${write}] = x[${read}];
% endif
