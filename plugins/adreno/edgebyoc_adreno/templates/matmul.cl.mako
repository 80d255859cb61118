<%namespace name="common" file="_common.mako"/>\
## MatMul [M, K] x [K, N]: thread (tx, ty) computes rows ty*TM .. +TM-1, column groups
## tx*TN .. +TN-1 (four columns each).
<%
    TN, TM = cfg.tile
    K4, N4 = c4(k.depth), c4(k.cols)
    lhs, rhs = layouts
%>\
${common.header(fp16, layouts)}
__kernel __attribute__((reqd_work_group_size(${cfg.group[0]}, ${cfg.group[1]}, 1)))
void ${name}(__read_only image2d_t lhs, __read_only image2d_t rhs,
             __global const real* bias, __global real* output) {
${common.thread_xy(cfg, warp_size)}
    const int n0 = tx * ${TN}, m0 = ty * ${TM};
    if (n0 >= ${N4} || m0 >= ${k.rows}) return;
% for tm in range(TM):
%   for tn in range(TN):
    real4 acc_${tm}_${tn} = (real4)(0);
%   endfor
% endfor
    for (int k4 = 0; k4 < ${K4}; ++k4) {
% for tm in range(TM):
        const real4 a_${tm} = m0 + ${tm} < ${k.rows} ? READ_TEXEL(lhs, SAMPLER, TEX0(${lane_call(lhs, f"m0 + {tm}")}, k4)) : (real4)(0);
% endfor
% for j, comp in enumerate("xyzw"):
%   for tn in range(TN):
        {
            const real4 b = n0 + ${tn} < ${N4} ? READ_TEXEL(rhs, SAMPLER, TEX1(${lane_call(rhs, f"n0 + {tn}")}, k4 * 4 + ${j})) : (real4)(0);
%     for tm in range(TM):
            acc_${tm}_${tn} = mad((real4)(a_${tm}.${comp}), b, acc_${tm}_${tn});
%     endfor
        }
%   endfor
% endfor
    }
% for tm in range(TM):
%   for tn in range(TN):
    if (m0 + ${tm} < ${k.rows}) {
%     for j, comp in enumerate("xyzw"):
        if ((n0 + ${tn}) * 4 + ${j} < ${k.cols}) {
            const int column = (n0 + ${tn}) * 4 + ${j};
            real value = acc_${tm}_${tn}.${comp};
${common.epilogue(k.epilogue, "value", "column")}\
            output[(m0 + ${tm}) * ${k.cols} + column] = value;
        }
%     endfor
    }
%   endfor
% endfor
}
