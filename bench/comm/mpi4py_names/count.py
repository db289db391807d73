"""Counts the mpi4py names each program of a corpus uses (docs/benchmarks/2026-12-06-cpu-mpi4py-names/).

    python3 count.py CORPUS MPI.pyi OUT.json    CORPUS: one folder per repository (owner+name/...); MPI.pyi: mpi4py's
                                                stub (src/mpi4py/MPI.pyi), whose classes say which names are methods
"""
import ast, io, json, os, re, subprocess, sys, tokenize, collections

CORPUS, PYI, OUT = sys.argv[1], sys.argv[2], sys.argv[3]

# ---- names from mpi4py's own stub (src/mpi4py/MPI.pyi at mpi4py HEAD) ----
t = ast.parse(open(PYI).read())
methods = collections.defaultdict(set)   # method name -> classes
props = collections.defaultdict(set)     # property name -> classes
for n in t.body:
    if isinstance(n, ast.ClassDef):
        for m in n.body:
            if isinstance(m, ast.FunctionDef) and not m.name.startswith('_'):
                decos = [getattr(d, 'id', getattr(d, 'attr', '')) for d in m.decorator_list]
                if 'property' in decos:
                    props[m.name].add(n.name)
                else:
                    methods[m.name].add(n.name)
# lower-case names that clash with builtins / numpy / pickle / dict API: not counted as bare ".name(" calls
CLASH = {'allocate','cast','clear','copy','decode','dumps','dumps_oob','loads','loads_oob','free','get','items',
         'keys','pop','popitem','update','values','tobytes','frombuffer','release','fromaddress','fromint','toint',
         'fromhandle','tohandle','fromcode','tocode','py2f','f2py','complete'}
# receivers that are clearly not mpi4py objects
BAD_RECV = re.compile(r'^(np|numpy|cp|cupy|torch|dist|functools|pickle|json|os|sys|re|time|random|math|str|threading|queue|socket|subprocess|shutil|string)\b')
BAD_RECV2 = re.compile(r'\b(np|numpy|cp|cupy)\.(add|multiply|maximum|minimum|logical_\w+|bitwise_\w+)$')

COMM_PROPS = {'rank','size','group','name','topo','is_inter','is_intra','is_topo','info','remote_size','remote_group',
              'dims','periods','coords','ndim','indegree','outdegree','inedges','outedges'}
STATUS_PROPS = {'source','tag','error','count','cancelled'}

def strip(src):
    """Blank out comments and string literals (keep f-string {expressions})."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except Exception:
        return re.sub(r'#[^\n]*', '', src), False
    lines = src.splitlines(keepends=True)
    out = [list(l) for l in lines]
    for tok in toks:
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            keep = ''
            if tok.type == tokenize.STRING:
                pre = re.match(r'^[A-Za-z]*', tok.string).group(0).lower()
                if 'f' in pre:
                    keep = ' '.join(re.findall(r'\{([^{}]*)\}', tok.string))
            (sr, sc), (er, ec) = tok.start, tok.end
            for r in range(sr, er + 1):
                line = out[r - 1]
                a = sc if r == sr else 0
                b = ec if r == er else len(line)
                for i in range(a, b):
                    if line[i] != '\n':
                        line[i] = ' '
            if keep:
                line = out[sr - 1]
                for i, ch in enumerate(keep[: max(0, (ec - sc) - 2) if sr == er else 0]):
                    line[sc + 1 + i] = ch
    return ''.join(''.join(l) for l in out), True

def analyse(text):
    code, ok = strip(text)
    occ = collections.Counter()
    # module aliases for mpi4py.MPI
    aliases = {'MPI'}
    for m in re.finditer(r'import\s+mpi4py\.MPI\s+as\s+(\w+)', code):
        aliases.add(m.group(1))
    for m in re.finditer(r'from\s+mpi4py\s+import\s+MPI\s+as\s+(\w+)', code):
        aliases.add(m.group(1))
    alias_re = '|'.join(sorted(re.escape(a) for a in aliases))
    # MPI.<Name> and MPI.<Name>.<Sub>  (also mpi4py.MPI.<Name>, alias.<Name>)
    for m in re.finditer(r'(?<![\w.])(?:mpi4py\.)?(?:%s)\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?' % alias_re, code):
        name, sub = m.group(1), m.group(2)
        occ['MPI.' + name] += 1
        if sub and name[0].isupper() and not name.isupper():   # class-level, e.g. MPI.Win.Create, MPI.File.Open
            occ['MPI.%s.%s' % (name, sub)] += 1
    # from mpi4py.MPI import X
    for m in re.finditer(r'from\s+mpi4py\.MPI\s+import\s+([\w ,()]+)', code):
        for nm in re.findall(r'\w+', m.group(1)):
            if nm != 'as':
                occ['MPI.' + nm] += 1
    # other mpi4py sub-modules
    for m in re.finditer(r'(?<![\w.])mpi4py\.(futures|util|rc|run|bench|typing|get_include|get_config|profile)\b', code):
        occ['mpi4py.' + m.group(1)] += 1
    for m in re.finditer(r'from\s+mpi4py(\.\w+)*\s+import\s+([\w ,()]+)', code):
        mod = m.group(0).split()[1]
        for nm in re.findall(r'\w+', m.group(2)):
            if nm not in ('MPI', 'as') and not mod.startswith('mpi4py.MPI'):
                occ['%s.%s' % (mod, nm)] += 1
    # method calls .Name(
    for m in re.finditer(r'((?:[\w\]\)]+\.)*?[\w\]\)]*)\.([A-Za-z_]\w*)\s*\(', code):
        recv, name = m.group(1), m.group(2)
        if name not in methods or name.startswith('_') or name in CLASH:
            continue
        if BAD_RECV.match(recv) or BAD_RECV2.search(recv + '.' + name):
            continue
        if re.fullmatch(r'(?:mpi4py\.)?(?:%s)' % alias_re, recv):
            continue  # module-level function, already counted as MPI.<Name>
        if re.fullmatch(r'(?:mpi4py\.)?(?:%s)\.[A-Z]\w*[a-z]\w*' % alias_re, recv):
            continue  # class-level call MPI.Win.Create(...), already counted as MPI.Win.Create
        if re.search(r'(event|cv|cond|thread|futures|lock|executor|pool)$', recv.split('.')[-1], re.I):
            continue  # threading / concurrent.futures objects
        if name in ('cancel', 'done') and not re.search(r'req', recv.split('.')[-1], re.I):
            continue  # concurrent.futures.Future.cancel() etc.
        occ['.%s()' % name] += 1
    # properties on communicator-ish / status-ish receivers
    for m in re.finditer(r'([\w.\]\)]+)\.([a-z_]\w*)\b(?!\s*\()', code):
        recv, name = m.group(1), m.group(2)
        last = recv.split('.')[-1]
        if name in COMM_PROPS and re.search(r'comm|world|COMM_', last, re.I):
            occ['Comm.%s (property)' % name] += 1
        elif name in STATUS_PROPS and re.search(r'stat', last, re.I):
            occ['Status.%s (property)' % name] += 1
    return occ, ok

def main():
    files = []
    for root, _, fs in os.walk(CORPUS):
        for f in fs:
            files.append(os.path.join(root, f))
    files.sort()
    per = {}
    untok = []
    for f in files:
        rel = os.path.relpath(f, CORPUS)
        occ, ok = analyse(open(f, encoding='utf-8', errors='replace').read())
        if not ok:
            untok.append(rel)
        per[rel] = dict(sorted(occ.items()))
    tot_occ = collections.Counter(); tot_prog = collections.Counter()
    for rel, occ in per.items():
        for k, v in occ.items():
            tot_occ[k] += v; tot_prog[k] += 1
    json.dump({'programs': per, 'totals': {k: {'programs': tot_prog[k], 'occurrences': tot_occ[k]} for k in tot_prog},
               'fallback_no_tokenize': untok}, open(OUT, 'w'), indent=1, sort_keys=False)
    rows = sorted(tot_prog, key=lambda k: (-tot_prog[k], -tot_occ[k], k))
    return per, rows, tot_prog, tot_occ, untok

if __name__ == '__main__':
    per, rows, tp, to, untok = main()
    print(len(per), 'files; untokenizable:', untok)
    for k in rows[:80]:
        print('%-40s %4d %5d' % (k, tp[k], to[k]))
