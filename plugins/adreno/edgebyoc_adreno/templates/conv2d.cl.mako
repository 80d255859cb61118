<%namespace name="common" file="_common.mako"/>\
## Conv2D (groups 1), depthwise Conv2D and DeConv2D (gather form) over NCHW outputs.
## Thread (tx, ty, z): output columns tx*TX .. +TX-1 of row ty, channel groups z*TK .. +TK-1.
<%
    TX, TK = cfg.tile
    FY, FX = k.kernel
    SY, SX = k.stride
    DY, DX = k.dilation
    TOP, LEFT = k.padding[0], k.padding[1]
    C4, K4 = c4(k.channels), c4(k.out_channels)
    inp, wgt = layouts
%>\
${common.header(fp16, layouts)}
__kernel __attribute__((reqd_work_group_size(${cfg.group[0]}, ${cfg.group[1]}, 1)))
void ${name}(__read_only image2d_t input, __read_only image2d_t weight,
             __global const real* bias, __global real* output) {
${common.thread_xy(cfg, warp_size)}
    const int oy = ty, ox0 = tx * ${TX}, kg0 = get_global_id(2) * ${TK};
    if (oy >= ${k.out_height} || ox0 >= ${k.out_width}) return;
% for tk in range(TK):
%   for t in range(TX):
    real4 acc_${tk}_${t} = (real4)(0);
%   endfor
% endfor
    for (int fy = 0; fy < ${FY}; ++fy) {
        for (int fx = 0; fx < ${FX}; ++fx) {
% if k.kind == "deconv":
            const int ny = oy + ${TOP} - fy * ${DY};
            const int iy = ny / ${SY};
            const int row_ok = ny >= 0 && ny % ${SY} == 0 && iy < ${k.height};
% else:
            const int iy = oy * ${SY} + fy * ${DY} - ${TOP};
            const int row_ok = iy >= 0 && iy < ${k.height};
% endif
% for t in range(TX):
%   if k.kind == "deconv":
            const int nx_${t} = ox0 + ${t} + ${LEFT} - fx * ${DX};
            const int ix_${t} = nx_${t} / ${SX};
            const int ok_${t} = row_ok && ox0 + ${t} < ${k.out_width} && nx_${t} >= 0 && nx_${t} % ${SX} == 0 && ix_${t} < ${k.width};
%   else:
            const int ix_${t} = (ox0 + ${t}) * ${SX} + fx * ${DX} - ${LEFT};
            const int ok_${t} = row_ok && ox0 + ${t} < ${k.out_width} && ix_${t} >= 0 && ix_${t} < ${k.width};
%   endif
% endfor
% if k.kind == "depthwise":
            const int r = fy * ${FX} + fx;
%   for tk in range(TK):
            if (kg0 + ${tk} < ${K4}) {
                const real4 w = READ_TEXEL(weight, SAMPLER, TEX1(${lane_call(wgt, f"kg0 + {tk}")}, r));
%     for t in range(TX):
                const real4 x_${t} = ok_${t} ? READ_TEXEL(input, SAMPLER, TEX0(iy, ix_${t}, kg0 + ${tk})) : (real4)(0);
                acc_${tk}_${t} = mad(x_${t}, w, acc_${tk}_${t});
%     endfor
            }
%   endfor
% else:
            for (int c4 = 0; c4 < ${C4}; ++c4) {
%   for t in range(TX):
                const real4 x_${t} = ok_${t} ? READ_TEXEL(input, SAMPLER, TEX0(iy, ix_${t}, c4)) : (real4)(0);
%   endfor
                const int r = ((fy * ${FX} + fx) * ${C4} + c4) * 4;
%   for j, comp in enumerate("xyzw"):
%     for tk in range(TK):
                {
                    const real4 w = kg0 + ${tk} < ${K4} ? READ_TEXEL(weight, SAMPLER, TEX1(${lane_call(wgt, f"kg0 + {tk}")}, r + ${j})) : (real4)(0);
%       for t in range(TX):
                    acc_${tk}_${t} = mad((real4)(x_${t}.${comp}), w, acc_${tk}_${t});
%       endfor
                }
%     endfor
%   endfor
            }
% endif
        }
    }
% for tk in range(TK):
%   for t in range(TX):
    if (ox0 + ${t} < ${k.out_width}) {
%     for j, comp in enumerate("xyzw"):
        if ((kg0 + ${tk}) * 4 + ${j} < ${k.out_channels}) {
            const int channel = (kg0 + ${tk}) * 4 + ${j};
            real value = acc_${tk}_${t}.${comp};
${common.epilogue(k.epilogue, "value", "channel")}\
            output[(channel * ${k.out_height} + oy) * ${k.out_width} + ox0 + ${t}] = value;
        }
%     endfor
    }
%   endfor
% endfor
}
