# A private certificate authority, and the database server's certificate for
# the name clients connect to (here localhost), signed by it.
set -eu
server_name=${1:-localhost}
openssl req -x509 -new -nodes -days 365 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -subj "/CN=aedb_queue example CA" -keyout ca.key -out ca.crt \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -subj "/CN=$server_name" -keyout server.key -out server.csr
printf 'subjectAltName = DNS:%s\nbasicConstraints = CA:FALSE\nkeyUsage = digitalSignature\nextendedKeyUsage = serverAuth\n' \
    "$server_name" >server.ext
openssl x509 -req -days 365 -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
    -extfile server.ext -out server.crt
chmod 600 ca.key server.key
