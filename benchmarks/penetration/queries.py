"""The two workloads' lookups, shared by app.py (the server) and run.py (setup, calibration).

  cheap  the product row by primary key: microseconds in a warm PostgreSQL, so the Python
         app, not the database, is the bottleneck.
  heavy  a product page: the product row with an aggregate over its reviews, on a column
         with no index, so every lookup, found or not, scans the reviews table (the
         aggregate is computed before the product is joined).  The database does
         milliseconds of work per request and saturates, as in published cache-penetration
         write-ups.

Each is one statement (one transaction: the app runs in autocommit), with %(id)s the id.
"""

WORKLOADS = ("cheap", "heavy")

LOOKUP = {
    "cheap": "SELECT id, name, price FROM products WHERE id = %(id)s",
    "heavy": (
        "SELECT p.id, p.name, p.price, r.n, r.avg "
        "FROM (SELECT count(*) AS n, avg(rating) AS avg "
        "      FROM reviews WHERE product_id = %(id)s) AS r "
        "LEFT JOIN products AS p ON p.id = %(id)s"
    ),
}

# reviews.product_id has no index on purpose: the heavy lookup scans the table.
CREATE_REVIEWS = (
    "CREATE TABLE reviews (id bigint PRIMARY KEY, product_id bigint NOT NULL, "
    "rating smallint NOT NULL)"
)
# reviews spread over the products: review i is for product 1 + (i * 7919) mod rows
FILL_REVIEWS = (
    "INSERT INTO reviews SELECT i, 1 + (i * 7919) %% %(rows)s, 1 + (i * 31) %% 5 "
    "FROM generate_series(1::bigint, %(reviews)s) AS i"
)


def row_to_value(workload: str, row):
    """The JSON value of a product, or None when the id is not a product."""
    if row is None or row[0] is None:
        return None
    value = {"id": row[0], "name": row[1], "price": str(row[2])}
    if workload == "heavy":
        value["reviews"] = int(row[3])
        value["rating"] = None if row[4] is None else round(float(row[4]), 2)
    return value
